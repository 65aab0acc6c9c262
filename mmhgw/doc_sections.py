"""Sections of a markdown page that a tool writes and writes again: the
text between the lines ``<!-- KEY:begin -->`` and ``<!-- KEY:end -->``.
Everything outside them (headings, readings written by hand, other tools'
sections) is kept as it stands."""
import os
import re


def _pattern(key: str) -> re.Pattern:
    return re.compile(
        f'^<!-- {re.escape(key)}:begin -->$.*?^<!-- {re.escape(key)}:end -->$',
        re.S | re.M)


def check_section(text: str, key: str) -> None:
    """Raise ValueError unless ``text`` has section ``key`` once, with its
    begin and end lines, or not at all."""
    found = len(_pattern(key).findall(text))
    begins = len(re.findall(f'^<!-- {re.escape(key)}:begin -->$', text, re.M))
    if found > 1 or begins != found:
        raise ValueError(
            f'the page has {begins} begin markers of section {key!r} and '
            f'{found} complete sections; expected one begin and one '
            f'end line, or none')


def put_section(text: str, key: str, body: str) -> str:
    """``text`` with section ``key`` holding ``body``: the section replaced
    where ``text`` has it, else appended at the end (never in place of other
    text)."""
    check_section(text, key)
    body = body.strip('\n')
    section = f'<!-- {key}:begin -->\n{body}\n<!-- {key}:end -->'
    pattern = _pattern(key)
    if pattern.search(text):
        return pattern.sub(lambda _: section, text)
    return text.rstrip('\n') + '\n\n' + section + '\n'


def write_section(path: str, key: str, body: str, new_page: str) -> None:
    """Put section ``key`` holding ``body`` into the page at ``path``;
    a page that does not exist yet starts as ``new_page`` (e.g. its
    heading)."""
    text = open(path).read() if os.path.exists(path) else new_page
    text = put_section(text, key, body)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, 'w') as f:
        f.write(text)
