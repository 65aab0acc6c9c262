"""mmhgw.doc_sections: a tool's section of a page is rewritten in place and
nothing around it is lost; a page whose markers do not pair is refused."""
import pytest

from mmhgw import benchmarking
from mmhgw.doc_sections import put_section, write_section

PAGE = ('# Page\n\nBy hand, before.\n\n<!-- study:begin -->\nold table\n'
        '<!-- study:end -->\n\n## Reading\nBy hand, after.\n')


def test_section_is_replaced_and_the_rest_kept():
    text = put_section(PAGE, 'study', 'new table\n')
    assert text == PAGE.replace('old table', 'new table')
    # Another key's section goes to the end; the first is untouched.
    both = put_section(text, 'other', 'more')
    assert both.startswith(text.rstrip('\n'))
    assert both.endswith('<!-- other:begin -->\nmore\n<!-- other:end -->\n')
    assert put_section(both, 'study', 'x').count('new table') == 0


def test_page_without_the_section_gets_it_appended():
    page = '# Notes\n\nA reading.\n'
    text = put_section(page, 'study', 'table')
    assert text == page + '\n<!-- study:begin -->\ntable\n<!-- study:end -->\n'


@pytest.mark.parametrize('page', [
    '<!-- study:begin -->\nhalf a section\n',
    PAGE + PAGE,
    PAGE + '<!-- study:begin -->\n',
    PAGE + '<!-- study:end -->\n',
    'text\n<!-- study:end -->\n',
])
def test_unpaired_or_repeated_markers_are_refused(page):
    with pytest.raises(ValueError, match="section 'study'"):
        put_section(page, 'study', 'table')


def test_write_section_starts_a_new_page_and_keeps_an_old_one(tmp_path):
    path = tmp_path / 'docs' / 'report.md'
    write_section(str(path), 'study', 'first', new_page='# Report\n')
    assert path.read_text() == ('# Report\n\n<!-- study:begin -->\nfirst\n'
                                '<!-- study:end -->\n')
    path.write_text(path.read_text() + '\nBy hand.\n')
    write_section(str(path), 'study', 'second', new_page='# Unused\n')
    text = path.read_text()
    assert text.startswith('# Report\n') and text.endswith('\nBy hand.\n')
    assert 'second' in text and 'first' not in text


def test_a_failed_write_keeps_the_page_and_leaves_no_temporary_file(
        tmp_path, monkeypatch):
    path = tmp_path / 'report.md'
    path.write_text(PAGE)

    def disk_full(src, dst):
        raise OSError(28, 'No space left on device')

    monkeypatch.setattr('mmhgw.doc_sections.os.replace', disk_full)
    with pytest.raises(OSError, match='No space'):
        write_section(str(path), 'study', 'new table', new_page='')
    assert path.read_text() == PAGE
    assert sorted(p.name for p in tmp_path.iterdir()) == ['report.md']


def test_benchmark_sections_carry_where_they_were_measured(tmp_path):
    doc = str(tmp_path / 'benchmarks.md')
    info = dict(command='python bench/x.py', machine='CPU Z', date='D')
    benchmarking.write_section('x-cpu', 'X', '| a |', info=info, doc=doc)
    benchmarking.write_section('y-cpu', 'Y', '| b |', info=info, doc=doc)
    benchmarking.write_section('x-cpu', 'X', '| c |', info=info, doc=doc)
    text = open(doc).read()
    assert text.startswith('# Benchmarks\n')
    assert text.index('## X') < text.index('## Y')  # replaced in place
    assert '| c |' in text and '| a |' not in text and '| b |' in text
    assert 'Command: `python bench/x.py`' in text and 'Machine: CPU Z' in text
