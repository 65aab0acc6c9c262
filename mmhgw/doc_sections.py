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

    def lines(marker):
        return len(
            re.findall(f'^<!-- {re.escape(key)}:{marker} -->$', text, re.M))

    begins, ends = lines('begin'), lines('end')
    if found > 1 or begins != found or ends != found:
        raise ValueError(
            f'the page has {begins} begin and {ends} end markers of section '
            f'{key!r} and {found} complete sections; expected one begin and '
            f'one end line, or none')


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
    text = new_page
    if os.path.exists(path):
        with open(path) as f:
            text = f.read()
    text = put_section(text, key, body)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    # Whole or not at all: an interrupted write must not cut the page,
    # and a failed one leaves no temporary file beside it.
    tmp = path + '.tmp'
    try:
        with open(tmp, 'w') as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
