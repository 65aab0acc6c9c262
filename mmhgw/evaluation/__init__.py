from .separability import SeparabilityMetric

__all__ = ['SeparabilityMetric']
