"""Solution markers and the project's files: what the handout stubs and what the grader copies.

In the reference code the lines a student writes sit between `# BEGIN SOLUTION <exercise id>` and
`# END SOLUTION` (nbgrader's idea), at the same indentation, inside the function; the signature and
docstring stay outside. `stub` replaces such a block by one line,
`raise NotImplementedError("exercise <id>: see course/EXERCISES.md")`. A tree without markers (the
handout itself) comes through `stub` unchanged.
"""
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

BEGIN = re.compile(r"^(?P<indent>[ \t]*)# BEGIN SOLUTION\b(?P<rest>.*)$")
END = re.compile(r"^(?P<indent>[ \t]*)# END SOLUTION\b(?P<rest>.*)$")
STUB = 'raise NotImplementedError("exercise {id}: see course/EXERCISES.md")'
SKIP_DIRS = {".git", ".venv", "runs", "__pycache__", ".pytest_cache"}


class Refused(Exception):
    """The source cannot be turned into a handout; the message is one line naming file:line."""


@dataclass
class Block:
    id: str
    start: int  # index of the BEGIN line
    end: int  # index of the END line
    indent: str


def find_blocks(text: str, where: str) -> list[Block]:
    """The solution blocks of one file. Raises Refused on a nested, unpaired or malformed marker."""
    blocks, open_ = [], None
    for i, line in enumerate(text.split("\n")):
        if m := BEGIN.match(line):
            ids = m["rest"].split()
            if open_:
                raise Refused(f"{where}:{i + 1}: BEGIN SOLUTION inside the block opened at line {open_.start + 1} "
                              f"(nested markers are not allowed)")
            if len(ids) != 1:
                raise Refused(f"{where}:{i + 1}: BEGIN SOLUTION needs exactly one exercise id")
            open_ = Block(ids[0], i, -1, m["indent"])
        elif m := END.match(line):
            if not open_:
                raise Refused(f"{where}:{i + 1}: END SOLUTION without a BEGIN SOLUTION")
            if m["rest"].strip():
                raise Refused(f"{where}:{i + 1}: END SOLUTION takes no id")
            if m["indent"] != open_.indent:
                raise Refused(f"{where}:{i + 1}: END SOLUTION is not at the indentation of its BEGIN (line {open_.start + 1})")
            if i == open_.start + 1:
                raise Refused(f"{where}:{i + 1}: empty solution block")
            open_.end = i
            blocks.append(open_)
            open_ = None
    if open_:
        raise Refused(f"{where}:{open_.start + 1}: BEGIN SOLUTION {open_.id} is never closed (no END SOLUTION)")
    return blocks


def stub(text: str, blocks: list[Block], ids) -> str:
    """text with the blocks of the exercises `ids` replaced by their one-line stub."""
    lines = text.split("\n")
    for b in sorted((b for b in blocks if b.id in ids), key=lambda b: -b.start):
        lines[b.start:b.end + 1] = [b.indent + STUB.format(id=b.id)]
    return "\n".join(lines)


def project_files(src: Path) -> list[str]:
    """Relative paths of the project's files: git's tracked ones (their working-tree content; a new
    file goes in once it is `git add`ed, so a scratch file never leaks into a handout), or, outside a
    repository (an unpacked autograder bundle), a walk; never .git, .venv, runs, caches or symlinks."""
    try:
        out = subprocess.run(["git", "-C", str(src), "ls-files", "-z", "--cached"],
                             capture_output=True, check=True).stdout.decode()
        files = [f for f in out.split("\0") if f]
    except (OSError, subprocess.CalledProcessError):
        files = []
    if not files:  # not a repository, or an ignored folder inside one (runs/handout)
        files = [str(p.relative_to(src)) for p in src.rglob("*")]
    return sorted(f for f in set(files) if not SKIP_DIRS & set(Path(f).parts)
                  and (src / f).is_file() and not (src / f).is_symlink())


def read_text(path: Path) -> str | None:
    """A file's text, or None for a binary file (copied as bytes)."""
    try:
        return path.read_text()
    except (UnicodeDecodeError, OSError):
        return None
