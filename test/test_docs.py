#!/usr/bin/env python3
"""test_docs.py: the documentation states only facts the code has. Over README.md, test/README.md,
doc/*.md, dev/*.md and dev/*/*.md (inline `code` spans; commands in code blocks):
  1. names: every code name (a span that is an identifier, `a.b`, `f(...)`, `T<...>`, `x[...]`, a glob
     `model_*`, a macro -DNAME, a setting NAME=...) is a word of the repository's code (C, C++, CUDA,
     Python, shell, make; comments left out); every source path (`train.h`, `dev/scaling.py`,
     `build/generate`) and every command's program is a file or a program of it; make's targets and
     variables are the Makefile's; the few names from elsewhere are in EXTERNAL, each with why;
  2. places: a name said to be in a file (`name` in `file.h`, `name` (`file.h`), file.h's `name`,
     `file.h` (`a`, `b`)) is defined there; `a` -> `b`, `a` calls `b`, `b` (called by `a`) name a
     call in a's body; a table with an "includes" column gives each file's own #include lines;
  3. flags: every --flag of a ./train (./train_gpu, mpirun ./train ...) command, and every --flag a
     trainer's page states alone, is in `build/train --help` (train_gpu also takes --matmul), and so
     is a run record's flag name (`seq-len`); any other --flag is one some program here reads;
  4. defaults: every default a trainer's page states for a ./train flag is the one `build/train
     --help` prints, in the forms the pages use (stated_defaults);
  5. lines: the core sources (*.h, *.c, *.cu at the root and in harness/, harness/*.cuh, tools/*.c, *.py, *.sh, the Makefile) keep
     within 120 columns;
  6. facts stated twice: a NAME=value (a page's span, the code's comments and messages) names a make
     variable, an environment variable or a macro read here; a list, table or count of a run
     directory's files (pages and --help) is the one run_dir_paths makes; a decay "over N steps" on
     a trainer's page says where ./train ends it (--steps, as --help says); a page that calls resume
     bit-exact links the section of gpu.md that gives its conditions; design.md's reading-order
     table lists the root's sources and its folders of code, as the tree holds them;
  7. scripts: every tracked file that begins with #! is checked out executable (test/run.sh runs them);
and a self-check: a page with a planted error of each kind is caught, the same page without it
passes. BUILD (the environment, as make test passes it; default build) names the build directory.
Runs from the repository root in about two seconds. Ends with 'test_docs: N passed, N failed'."""
import fnmatch
import glob
import io
import os
import re
import subprocess
import sys
import tokenize

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from harness import check, summary  # noqa: E402  (test/harness.py)
SELF = "test/test_docs.py"  # not code the pages describe: its planted names would count as code

# Names a page may use that no code here defines: other projects' code, libraries and tools. Each
# says where it is from; anything else a page names must be in the repository.
EXTERNAL = {
    # Radford et al.'s code (openai/generating-reviews-discovering-sentiment), doc/transfer.md
    "train_with_reg_cv": "the classifier sweep of Radford et al.'s utils.py",
    "load_params": "Radford et al.'s encoder.py",
    "tf.get_variable": "TensorFlow, in Radford et al.'s encoder.py",
    "tf.nn.l2_normalize": "TensorFlow, in Radford et al.'s encoder.py",
    "preprocess": "Radford et al.'s encoder.py",
    "encoder.py": "Radford et al.'s repository",
    "np.concatenate": "NumPy, in Radford et al.'s encoder.py",
    "out_wn": "Radford et al.'s encoder.py",
    # NVIDIA's sentiment-discovery (Puri et al.), doc/schedules.md
    "DynamicLossScaler": "sentiment-discovery's loss scaler",
    "analysis/reproduction.md": "a page of sentiment-discovery",
    "experiments/train_mlstm_singlenode.sh": "a script of sentiment-discovery",
    "analysis/scale.md": "a page of sentiment-discovery",
    "arguments.py": "sentiment-discovery's flags", "learning_rates.py": "sentiment-discovery's schedules",
    "LinearLR": "sentiment-discovery's linear decay, in its learning_rates.py",
    # libraries and tools, by their own names
    "include/nccl.h": "NCCL's header under NCCL_HOME",
    "include/cublasLt.h": "cuBLASLt's header under CUBLASLT_HOME",
    "NCCL_SOCKET_IFNAME": "NCCL's environment", "NCCL_IB_HCA": "NCCL's environment",
    "NCCL_IB_DISABLE": "NCCL's environment", "NCCL_DEBUG": "NCCL's environment",
    "UCX_NET_DEVICES": "UCX's environment (Open MPI over InfiniBand)",
    "nvidia-nccl-cu13": "NVIDIA's NCCL wheel on PyPI",
    "lscpu": "util-linux, the machine's description in dev/RESULTS.md",
    "tanhf": "libm", "expm1f": "libm",
}
# Open MPI's mpirun flags that doc/cluster.md shows on its command lines
OTHER_FLAGS = {"--hostfile", "--mca", "--map-by", "--bind-to"}

SOURCE_EXT = (".h", ".c", ".cu", ".cpp", ".py", ".sh", ".mk")
PATH_EXT = SOURCE_EXT + (".md",)  # a name ending so is a file of the repository (or EXTERNAL)
REPO_DIRS = ("test/", "tools/", "dev/", "doc/", "build/", ".ci/")
# The pages about the trainers: a flag alone in a span is ./train's, a default stated is --help's.
TRAINER_PAGES = ("README.md", "doc/design.md", "doc/training.md", "doc/schedules.md", "doc/formats.md",
                 "doc/cluster.md", "doc/gpu.md")
# the core sources whose lines keep within 120 columns (test/ and dev/ are exempt)
CORE_LINES = ("*.h", "*.c", "*.cu", "harness/*.h", "harness/*.cuh", "harness/*.cu", "tools/*.c", "tools/*.py", "tools/*.sh", "Makefile")
IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8", errors="replace") as f:
        return f.read()


# ---- the code: its words, its definitions, its function bodies, its flags

C_TOKENS = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)


def c_code(text, blank_strings=False):
    """C text without comments (line breaks kept); strings blanked too if asked (for brace matching)."""
    def keep(m):
        s = m.group(0)
        if s[0] in "\"'":
            return s[0] + " " * (len(s) - 2) + s[-1] if blank_strings else s
        return "\n" * s.count("\n") if s.startswith("/*") else " "
    return C_TOKENS.sub(keep, text)


def py_code(text):
    lines = text.splitlines(True)
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                (row, col) = tok.start
                lines[row - 1] = lines[row - 1][:col] + "\n"
    except (tokenize.TokenError, SyntaxError):
        pass
    return "".join(lines)


def sh_code(text):
    """Shell and make text without its comment lines (a # inside a line may be data: HASH := \\#)."""
    return "".join("\n" if ln.lstrip().startswith("#") else ln for ln in text.splitlines(True))


def repo_files():
    """Every file under the root, but for build outputs, a run in out/ and hidden folders."""
    out = []
    for d, dirs, files in os.walk(ROOT):
        rel = os.path.relpath(d, ROOT)
        dirs[:] = sorted(x for x in dirs if not x.startswith((".", "build", "__pycache__")) and
                         not (rel == "." and x == "out"))
        out += [os.path.normpath(os.path.join(rel, f)) for f in sorted(files)]
    return out + [".ci/run"]


def is_source(path):
    return (path.endswith(SOURCE_EXT) or os.path.basename(path) == "Makefile" or path == ".ci/run") and path != SELF


def code_of(path, text):
    if path.endswith((".h", ".c", ".cu", ".cpp")):
        return c_code(text)
    if path.endswith(".py"):
        return py_code(text)
    return sh_code(text)


def c_definitions(code):
    """The names a C/C++/CUDA file defines or declares at its top level: functions, macros, types,
    struct and enum tags, enum constants, variables."""
    names = set(re.findall(r"^[ \t]*#[ \t]*define[ \t]+(" + IDENT + ")", code, re.M))
    names |= set(re.findall(r"\b(?:struct|union|enum|class)\s+(" + IDENT + r")\s*(?::[^{;]*)?\{", code))
    names |= set(re.findall(r"\}\s*(" + IDENT + r")\s*;", code))
    names |= set(re.findall(r"\btypedef\b[^;{}]*?(" + IDENT + r")\s*(?:\[[^\]]*\]\s*)?;", code))
    names |= set(re.findall(r"\btypedef\b[^;{}]*\(\s*\*\s*(" + IDENT + r")\s*\)", code))
    names |= set(re.findall(r"\busing\s+(" + IDENT + r")\s*=", code))
    for body in re.findall(r"\benum\b[^{;()]*\{([^}]*)\}", code):
        names |= set(re.findall(r"(?:^|,)\s*(" + IDENT + ")", body))
    for ln in code.splitlines():
        if not ln or ln[0] in " \t#}{" or re.match(r"(return|if|else|for|while|do|switch|case|goto)\b", ln):
            continue
        m = re.match(r"[^=;(){}]*?\b(" + IDENT + r")\s*\(", ln)  # a function (or a prototype, a macro call)
        if m and m.group(1) not in ("__attribute__", "__launch_bounds__", "alignas", "static_assert"):
            names.add(m.group(1))
        m = re.match(r"[^=;(){}]*?\b(" + IDENT + r")\s*(?:\[[^\]]*\]\s*)*(?:=|;|\{\s*$)", ln)  # a variable
        if m:
            names.add(m.group(1))
    # a template's function on its own line, indented kernels and methods: type words, then name(
    names |= set(re.findall(r"^[ \t]*(?:template\s*<[^>]*>\s*)?(?:(?:static|inline|const|constexpr|extern|"
                            r"__global__|__device__|__host__|__forceinline__|HOSTDEV|FAST_INLINE|unsigned|"
                            r"struct)\s+)*" + IDENT + r"[\s*&]+(" + IDENT + r")\s*\([^;]*$", code, re.M))
    return names


def py_definitions(code):
    names = set(re.findall(r"^\s*(?:async\s+)?def\s+(" + IDENT + ")", code, re.M))
    names |= set(re.findall(r"^\s*class\s+(" + IDENT + ")", code, re.M))
    names |= set(re.findall(r"^(" + IDENT + r")\s*(?::[^=\n]*)?=(?!=)", code, re.M))
    return names


def sh_definitions(code):
    names = set(re.findall(r"^\s*(?:function\s+)?(" + IDENT + r")\s*\(\)", code, re.M))
    names |= set(re.findall(r"^\s*(?:export\s+|local\s+|readonly\s+)?(" + IDENT + r")\+?=", code, re.M))
    names |= set(re.findall(r"^(" + IDENT + r")\s*(?::=|\?=|\+=|=)", code, re.M))  # make
    names |= set(re.findall(r"^([A-Za-z0-9_.%/-]+)\s*:(?!=)", code, re.M))
    return names


def c_bodies(code):
    """name -> the bodies of the functions so named (C/C++/CUDA, comments and strings blanked)."""
    bodies = {}
    for m in re.finditer(r"\b(" + IDENT + r")\s*\(", code):
        # balanced parentheses, then qualifiers, then a brace: a definition
        depth, i = 0, m.end() - 1
        while i < len(code):
            depth += {"(": 1, ")": -1}.get(code[i], 0)
            i += 1
            if depth == 0:
                break
        tail = re.match(r"(?:\s|const\b|noexcept\b|override\b|__attribute__\s*\(\([^)]*\)\))*\{", code[i:])
        if not tail or m.group(1) in ("if", "for", "while", "switch", "catch", "do"):
            continue
        start = i + tail.end() - 1
        depth, j = 0, start
        while j < len(code):
            depth += {"{": 1, "}": -1}.get(code[j], 0)
            j += 1
            if depth == 0:
                break
        bodies.setdefault(m.group(1), []).append(code[start:j])
    return bodies


def py_bodies(code):
    bodies = {}
    lines = code.splitlines()
    for k, ln in enumerate(lines):
        m = re.match(r"^(\s*)def\s+(" + IDENT + ")", ln)
        if not m:
            continue
        ind, body = len(m.group(1)), []
        for nxt in lines[k + 1:]:
            if nxt.strip() and len(nxt) - len(nxt.lstrip()) <= ind:
                break
            body.append(nxt)
        bodies.setdefault(m.group(2), []).append("\n".join(body))
    return bodies


class Code:
    """What the pages are checked against: the repository's files, the words of its code, what each
    source file defines, the functions' bodies, the flags its programs read, ./train's --help."""
    def __init__(self, help_text):
        self.files = set(repo_files())
        self.words, self.defs, self.bodies, self.flags, texts = set(), {}, {}, set(), []
        for path in sorted(p for p in self.files if is_source(p)):
            text = read(path)
            code = code_of(path, text)
            texts.append(code)
            self.words.update(re.findall(IDENT, code))
            self.flags.update(re.findall(FLAG, code))
            if path.endswith((".h", ".c", ".cu", ".cpp")):
                self.defs[path] = c_definitions(code)
                for k, v in c_bodies(c_code(text, blank_strings=True)).items():
                    self.bodies.setdefault(k, []).extend(v)
            elif path.endswith(".py"):
                self.defs[path] = py_definitions(code)
                for k, v in py_bodies(code).items():
                    self.bodies.setdefault(k, []).extend(v)
            else:
                self.defs[path] = sh_definitions(code)
        self.text = "\n".join(texts)
        self.make_targets = set().union(*(d for p, d in self.defs.items() if p.endswith(("Makefile", ".mk"))))
        # run.h's table holds the trainers' flags without their dashes
        self.flags.update("--" + n for n in re.findall(r'^\s*\{"([a-z0-9-]+)", ', read("harness/run.h"), re.M))
        self.train_flags = set(re.findall(r"^ {1,4}(--[a-z0-9-]+)", help_text, re.M))
        self.train_defaults = help_defaults(help_text)
        # the programs built here (build/NAME) and every program or script by name, for a page's context
        self.programs = {os.path.splitext(os.path.basename(p))[0] for p in self.files
                         if p.endswith((".c", ".cu")) and re.match(r"(tools|test|dev)/", p)}
        self.programs |= {"train", "train_gpu", "train_gpu_fp32", "test_gpu", "test_gpu_fp32", "cudacpu"}
        self.scripts = {os.path.splitext(os.path.basename(p))[0] for p in self.files if is_source(p) and
                        re.match(r"(tools|test|dev)/", p) and not p.endswith(".h")} - {"harness"}
        self.scripts |= {"mpirun", "nvcc", "test_gpu"}
        self.settings = settings_read(self.files)
        # NAME=value may also define a macro: MLSTM_REAL=double
        self.settable = self.settings | set(re.findall(r"^[ \t]*#[ \t]*(?:define|ifn?def|if)[ \t]+(?:defined[ (]*)?(" +
                                                       IDENT + ")", self.text, re.M))
        self.notes = [(p, n, t) for p in sorted(self.files) if is_source(p) for n, t in source_notes(p, read(p))]
        self.run_dir = run_dir_names(self.text)

    def find_files(self, name, page):
        """The repository files a page's path names: from the root, from the page's folder, or by file name."""
        name = name.rstrip("/")
        for cand in (name, os.path.normpath(os.path.join(os.path.dirname(page), name))):
            if cand in self.files or os.path.isdir(os.path.join(ROOT, cand)):
                return [cand]
        if "/" not in name:
            return sorted(p for p in self.files if os.path.basename(p) == name)
        return sorted(p for p in self.files if p.endswith("/" + name))


def help_defaults(help_text):
    """--flag -> the default `--help` prints, from "(default X)" or "(default: X)" in its entry."""
    out, entry, flag = {}, "", None
    for ln in help_text.splitlines() + [""]:
        m = re.match(r"^\s{1,4}(--[a-z0-9-]+)", ln)
        if m or not ln.startswith("      "):
            if flag:
                d = re.findall(r"\(default:?\s+([^()]*?)\)", entry)
                if d:
                    out[flag] = d[-1]
            flag, entry = (m.group(1), ln) if m else (None, "")
        else:
            entry += " " + ln.strip()
    return out


def same_value(stated, printed):
    """A stated default against --help's: numbers by value (2e-3 is 0.002), words as written."""
    a, b = stated.strip(" `\"'.,;:"), printed.strip(" `\"'.,;:")
    try:
        return float(a) == float(b)
    except ValueError:
        return a.rstrip("/") == b.rstrip("/")


# ---- the pages

def files_matching(patterns):
    return [os.path.relpath(p, ROOT) for pat in patterns
            for p in sorted(glob.glob(os.path.join(ROOT, pat), recursive=True))]


def doc_pages():
    return files_matching(("README.md", "test/README.md", "doc/*.md", "dev/*.md", "dev/*/*.md"))


def page_blocks(text):
    """(code lines, paragraphs): each line of a code block (fenced, or indented 4 after a blank line)
    as (line number, text), and each paragraph outside them as (first line number, its lines joined
    by newlines: what a sentence or a code span says may run over a line break)."""
    code, pars, cur, fenced, in_block, prev_blank = [], [], [], False, False, True
    for n, ln in enumerate(text.splitlines() + [""], 1):
        fence = ln.lstrip().startswith("```")
        in_block = not fence and ln.strip() != "" and ln.startswith("    ") and (prev_blank or in_block)
        prev_blank = ln.strip() == ""
        if fenced or in_block:
            code.append((n, ln))
        if fence or fenced or in_block or ln.strip() == "":
            if cur:
                pars.append((cur[0][0], "\n".join(x for _, x in cur)))
            cur = []
        else:
            cur.append((n, ln))
        if fence:
            fenced = not fenced
    return code, pars


def page_parts(text):
    """(line number, kind, text, context): each inline code span ('span', in the context of its
    paragraph) and each line of a code block ('code', its own context)."""
    code, pars = page_blocks(text)
    out = [(n, "code", ln, ln) for n, ln in code]
    for first, par in pars:
        out += [(first + par.count("\n", 0, m.start()), "span", m.group(1).replace("\n", " ").strip(), par)
                for m in re.finditer(r"`([^`]+)`", par)]
    return sorted(out, key=lambda x: x[0])


NAME_SPAN = re.compile(r"^(" + IDENT + r"(?:\." + IDENT + r")*)(?:\(.*\)|<.*>|\[.*\])?$")


def span_name(s):
    m = NAME_SPAN.match(s)
    return m.group(1) if m else None


def path_problem(word, page, code):
    """None if a path a page names is a file (or a program built, build/NAME) of the repository,
    else what is wrong; "" when the word is no path of the repository (a glob, a placeholder, a
    path outside it)."""
    word = word.rstrip(".,;:)")
    if not (word.endswith(PATH_EXT) or (word.startswith(REPO_DIRS) and "/" in word.rstrip("/"))) or \
            re.search(r"[*<>{}$?\[]|\.\.\.|(^|/)[A-Z_]+(/|$)|^\.\w+$", word) or word.startswith(("../", "./", "/")) \
            or word in EXTERNAL:
        return ""
    if word.startswith("build/"):
        prog = word.split("/")[1]
        return None if prog in code.programs or prog in code.text else "nothing here builds or writes %s" % prog
    if code.find_files(word, page) or any(code.find_files(word + e, page) for e in SOURCE_EXT):
        return None
    return "no such file in the repository"


# what may stand before a command's program: sudo, time, nice -n N, python3, VAR=value
WRAPPERS = re.compile(r"^(?:(?:sudo|time|exec)\s+|nice\s+-n\s+-?\d+\s+|(?:/usr/bin/)?python3\s+|"
                      r"[A-Z_][A-Z0-9_]*=\S*\s+)+")


def command_problems(cmd, page, code):
    """(checked, problems) for a command a page shows: its program or script is a file here, and
    make's targets and variables are the Makefile's."""
    m = WRAPPERS.match(cmd)
    checked, bad = 0, []
    for var in re.findall(r"(?:^|\s)([A-Z_][A-Z0-9_]*)=", m.group(0) if m else ""):
        checked += 1
        if var not in code.words and var not in EXTERNAL:
            bad.append("%s is no variable the code reads" % var)
    words = cmd[m.end() if m else 0:].split()
    if not words:
        return checked, bad
    if words[0] == "make":
        for w in words[1:]:
            if w in ("&&", "||", "|", ";", "#"):
                break
            checked += 1
            v = re.match(r"([A-Za-z_][A-Za-z0-9_]*)=", w)
            if v and v.group(1) not in code.settable:
                bad.append("make %s: no such variable in the Makefile" % v.group(1))
            elif not v and not w.startswith("-") and w not in code.make_targets and \
                    path_problem(w, page, code) is not None:
                bad.append("make %s: no such target" % w)
        return checked, bad
    problem = path_problem(words[0], page, code)
    if problem is not None and problem != "":
        bad.append("%s: %s" % (words[0], problem))
    return checked + (problem != ""), bad


def check_names(page, text, code):
    """Check 1: every source path of a span or a command is a file or program; every code name is a
    word of the code (a macro given with -D, a variable set NAME=..., a glob of names: some word).
    Returns (problems, how many were checked)."""
    bad, n_checked = [], 0
    made = set(re.findall(r">\s*([\w./-]+)", "\n".join(s for _, kind, s, _ in page_parts(text) if kind == "code")))
    for n, kind, s, _ in page_parts(text):
        if kind == "code":
            cmd = re.sub(r"^\s*\$\s+", "", s).strip()
            if cmd and not cmd.startswith("#") and not any(w in made for w in cmd.split()[:2]):
                c, b = command_problems(cmd, page, code)
                n_checked += c
                bad += ["%s:%d: %s" % (page, n, x) for x in b]
            continue
        if s in EXTERNAL or s.split()[0] in EXTERNAL:
            continue
        c, b = command_problems(s, page, code)
        n_checked += c
        bad += ["%s:%d: `%s`: %s" % (page, n, s, x) for x in b]
        if c:
            continue
        for d in re.findall(r"(?:^|\s)-D([A-Za-z_]\w*)", s):
            n_checked += 1
            if d not in code.words:
                bad.append("%s:%d: `%s`: no macro %s in the code" % (page, n, s, d))
        setting = re.match(r"^([A-Za-z_]\w*)=\S*$", s)
        glob_name = re.match(r"^[A-Za-z_][A-Za-z0-9_*]*\*[A-Za-z0-9_*]*$", s)
        name = span_name(s.replace("::", "."))
        if setting and SETTING.match(s):  # MAKE_OR_ENV=value: what a reader may set, so it must be read here
            n_checked += 1
            bad += ["%s:%d: `%s`" % (page, n, x) for x in setting_problems(s, s, code)]
            continue
        if setting:
            name = setting.group(1)
        if glob_name:
            n_checked += 1
            if not any(fnmatch.fnmatchcase(w, s) for w in code.words):
                bad.append("%s:%d: `%s` matches no name in the code" % (page, n, s))
        elif page in TRAINER_PAGES and re.match(r"^[a-z0-9]+(-[a-z0-9]+)+$", s):
            n_checked += 1  # a flag's name without its dashes (the run record's)
            if "--" + s not in code.train_flags:
                bad.append("%s:%d: `%s` is no flag of ./train" % (page, n, s))
        elif name and name.split(".")[0] not in EXTERNAL:
            n_checked += 1
            if any(len(part) > 1 and part not in code.words and part not in EXTERNAL for part in name.split(".")):
                bad.append("%s:%d: `%s` is no name in the code" % (page, n, s))
    return bad, n_checked


FILE_WORD = r"[\w./-]+\.(?:h|c|cu|cpp|py|sh|mk)"
SEP = r"(?:,\s*|\s+and\s+|\s+or\s+)"


def paragraphs(text):
    return page_blocks(text)[1]


DOTTED = IDENT + r"(?:\." + IDENT + r")*"


def place_claims(par):
    """(offset, name, file) for what a paragraph says is in a file: `name` in `file`, `name` is in
    file.h, `a`, `b` and `c` (`file.h`; ...), file.h's `name`, (`file.h`, `name`). A dotted name
    (`Options.given`) stands for its first part."""
    out = []
    for m in re.finditer(r"`(" + DOTTED + r")[^`]*`\s+(?:(?:is|are)\s+)?(?:in|from)\s+`?(" + FILE_WORD +
                         r")\b(?!`?'s)", par):
        out.append((m.start(), m.group(1), m.group(2)))
    for m in re.finditer(r"((?:`" + DOTTED + r"`" + SEP + r")*`" + DOTTED + r"`)\s*\(`?(" + FILE_WORD + r")`?[;,):]",
                         par):
        for k in re.finditer(r"`(" + DOTTED + ")`", m.group(1)):
            out.append((m.start() + k.start(), k.group(1), m.group(2)))
    for m in re.finditer(r"`?(" + FILE_WORD + r")`?'s\s+`(" + DOTTED + r")", par):
        out.append((m.start(), m.group(2), m.group(1)))
    for m in re.finditer(r"\(`?(" + FILE_WORD + r")`?,\s*`(" + DOTTED + r")`\)", par):
        out.append((m.start(), m.group(2), m.group(1)))
    # the file, then its names in parentheses: `run.h` (`RunRule`, `options_from_record`)
    for m in re.finditer(r"`?(" + FILE_WORD + r")`?\s*\(((?:`" + DOTTED + r"`" + SEP + r")*`" + DOTTED + r"`)\)", par):
        for k in re.finditer(r"`(" + DOTTED + ")`", m.group(2)):
            out.append((m.start(), k.group(1), m.group(1)))
    return [(at, name.split(".")[0], f) for at, name, f in out if not name.endswith(PATH_EXT)]


def call_claims(par):
    """(offset, caller, callee): `a` -> `b`, `a` calls `b` (and `c`, ...), `b` (called by `a`)."""
    out = []
    for m in re.finditer(r"`(" + IDENT + r")[^`]*`\s*(→|->|calls)\s*`(" + IDENT + ")`", par):
        out.append((m.start(), m.group(1), m.group(3)))
        rest = par[m.end():]
        while m.group(2) == "calls":  # a list: calls `b` (why) and `c`
            k = re.match(r"(?:\s*\([^()]*\))?" + SEP + r"`(" + IDENT + ")`", rest)
            if not k:
                break
            out.append((m.start(), m.group(1), k.group(1)))
            rest = rest[k.end():]
    out += [(m.start(), m.group(2), m.group(1)) for m in
            re.finditer(r"`(" + IDENT + r")[^`]*`\s*\(called by\s+`(" + IDENT + ")`", par)]
    return out


def include_claims(text):
    """(line, file, the project headers the row names, whether the row allows more) for each row of a
    table with an "includes" column: `file` | ... | `a.h`, `b.cu` (or "nothing of the project", or
    "... and the headers above")."""
    out, col = [], None
    for n, ln in enumerate(text.splitlines(), 1):
        cells = [c.strip() for c in ln.strip().strip("|").split("|")] if ln.lstrip().startswith("|") else None
        if cells is None:
            col = None
        elif "includes" in cells:
            col = cells.index("includes")
        elif col is not None and len(cells) > col and not set(cells[0]) <= set("-: "):
            f = re.match(r"`([\w./-]+)`$", cells[0])
            if f:
                named = set(re.findall(r"`([\w./-]+\.(?:h|cuh|cu))`", cells[col]))
                out.append((n, f.group(1), named, "above" in cells[col]))
    return out


def check_places(page, text, code):
    """Check 2: a name said to be in a file is defined there; a call a page states is in the caller; a
    file's includes are what a table of them says."""
    bad, n_checked = [], 0
    for n, f, named, more in include_claims(text):
        files = [x for x in code.find_files(f, page) if os.path.isfile(os.path.join(ROOT, x))]
        if not files:
            continue
        n_checked += 1
        actual = set(re.findall(r'^\s*#\s*include\s+"([^"]+)"', read(files[0]), re.M))
        if not named <= actual or (not more and actual != named):
            bad.append("%s:%d: `%s` includes %s; the table says %s" % (page, n, f, ", ".join(sorted(actual)) or
                       "nothing of the project", ", ".join(sorted(named)) or "nothing of the project"))
    for first, par in paragraphs(text):
        for at, name, f in place_claims(par):
            files = code.find_files(f, page)
            if name in EXTERNAL or not files:
                continue
            n_checked += 1
            if not any(name in code.defs.get(p, ()) for p in files):
                where = sorted(p for p, d in code.defs.items() if name in d)
                bad.append("%s:%d: `%s` is not defined in %s%s" % (page, first + par.count("\n", 0, at), name, f,
                           " (it is in %s)" % ", ".join(where) if where else ""))
        for at, a, b in call_claims(par):
            n_checked += 1
            line = first + par.count("\n", 0, at)
            if a not in code.bodies:
                bad.append("%s:%d: `%s`, said to call `%s`, is no function here" % (page, line, a, b))
            elif not any(re.search(r"\b%s\b" % re.escape(b), body) for body in code.bodies[a]):
                bad.append("%s:%d: `%s` does not call `%s`" % (page, line, a, b))
    return bad, n_checked


TRAINER = re.compile(r"(?:^|[\s;&|(])(?:\./)?(train|train_gpu|train_gpu_fp32)(?=\s|$)")
FLAG = r"(?<![\w-])--[a-z][a-z0-9-]*"


def command_flags(s):
    """The trainer a command line runs (train, train_gpu) and the --flags after it, or (None, [])."""
    m = TRAINER.search(s)
    if not m or s.lstrip().startswith(("#", "make", "build/", "tools/", "dev/", "cc ", "gcc ")):
        return None, []
    return m.group(1), re.findall(FLAG, s[m.end():].split(" #")[0])


def program_words(par):
    """The words of a paragraph that may name a program: those of its spans, and paths and names with
    underscores in its prose, each as a file name without its extension (a header or a page is none)."""
    words = [w for span in re.findall(r"`([^`]+)`", par) for w in re.split(r"[\s/]+", span)]
    words += [w for w in re.findall(r"[\w./-]+", re.sub(r"`[^`]*`", " ", par)) if "_" in w or "/" in w]
    words = [w.rstrip(".,;:)") for w in words]
    return {os.path.splitext(os.path.basename(w))[0] for w in words if not w.endswith((".h", ".md"))} - {""}


def check_flags(page, text, code):
    """Check 3: a trainer's flags are in --help; any other flag is one some program here reads."""
    bad, n_checked = [], 0
    gpu_only = {"--matmul"}
    for n, kind, s, line in page_parts(text):
        prog, flags = command_flags(s)
        if prog:
            for f in flags:
                n_checked += 1
                if f not in code.train_flags and not (prog != "train" and f in gpu_only):
                    bad.append("%s:%d: %s is not a flag of ./%s (%s)" % (page, n, f, prog, s.strip()[:60]))
            continue
        flags = re.findall(FLAG, s.split(" #")[0]) if kind == "code" else re.findall("^" + FLAG, s)
        # a flag alone on a trainer's page is the trainer's, unless its paragraph names another program
        # as code (in a span, or as a path or a name_with_underscores)
        alone = page in TRAINER_PAGES and kind == "span" and flags and not any(
            w.startswith(tuple(code.scripts)) for w in program_words(line.replace("`%s`" % s, "")))
        for f in flags:
            if f in OTHER_FLAGS:
                continue
            n_checked += 1
            if alone:
                if f not in code.train_flags | gpu_only:
                    bad.append("%s:%d: %s is not a flag of ./train (`%s`)" % (page, n, f, s))
            elif f not in code.flags and f not in code.train_flags:
                bad.append("%s:%d: %s is no program's flag here (`%s`)" % (page, n, f, s[:60]))
    return bad, n_checked


def stated_defaults(text):
    """(line, --flag, value) for each default a page states, in the forms the pages use:
    `--flag ...` (default X), `--flag ...`, default X, `--flag X` (default), a flag list's
    --flag ARG  what (default X), and two in words: the default model's sizes, the schedule without
    --lr-schedule."""
    out = []
    for first, par in paragraphs(text):
        for form in (r"`(--[a-z0-9-]+)[^`]*`\s*\(default:?\s+`?([^`),;]+)`?[),;]",
                     r"`(--[a-z0-9-]+)[^`]*`,\s*default:?\s+`?([^`),;\s]+)`?",
                     r"`(--[a-z0-9-]+)\s+([^`\s]+)`\s*\(default\)"):
            for m in re.finditer(form, par):
                out.append((first + par.count("\n", 0, m.start()), m.group(1), m.group(2)))
        # the default model in words: "the default small model (a 256-unit mLSTM, batch 32, T = 64, 800 steps)"
        for m in re.finditer(r"default (?:small )?model \(([^)]*)\)", par):
            at = first + par.count("\n", 0, m.start())
            for form, flag in ((r"(\d+)-unit", "--hidden"), (r"batch (\d+)", "--batch"), (r"T = (\d+)", "--seq-len"),
                               (r"(\d+) steps", "--steps")):
                out += [(at, flag, v) for v in re.findall(form, m.group(1))]
        # the schedule without --lr-schedule: "without `--lr-schedule` uses `legw` at 2e-3 for a batch of 32"
        for m in re.finditer(r"[Ww]ithout\s+`--lr-schedule`[^.]*?\b(legw|puri|linear|sqrt|constant)\b`?\s+"
                             r"(?:with|at)\s+([0-9.e-]+)[^.]*?batch\s+of\s+(\d+)", par, re.I):
            at = first + par.count("\n", 0, m.start())
            out += [(at, "--lr-schedule", m.group(1).lower()), (at, "--lr", m.group(2)),
                    (at, "--base-batch", m.group(3))]
    for n, kind, ln, _ in page_parts(text):
        m = re.match(r"^\s+(--[a-z0-9-]+)(?:\s+[A-Z|a-z0-9]+)?\s{2,}.*\((?:default:?\s+)?([-+0-9.e]+|[a-z]+)[);]",
                     ln)
        if kind == "code" and m:
            out.append((n, m.group(1), m.group(2)))
    return out


def check_defaults(page, text, code):
    """Check 4: every default a trainer's page states is --help's."""
    bad, n_checked = [], 0
    if page not in TRAINER_PAGES:
        return bad, n_checked
    for n, flag, value in stated_defaults(text):
        n_checked += 1
        printed = code.train_defaults.get(flag)
        if printed is None:
            bad.append("%s:%d: states a default for %s, which --help gives none" % (page, n, flag))
        elif not same_value(value, printed):
            bad.append("%s:%d: %s's default is %s here, %s in --help" % (page, n, flag, value, printed))
    return bad, n_checked

# ---- facts stated twice: in a page and in the code (or in the code's own comments and messages)

def settings_read(files):
    """The NAME of every NAME=value a reader may set: the make variables (set or read in the Makefile
    and test/cuda/*.mk) and the environment variables a program reads (getenv, env_switch, os.environ,
    a shell script's $NAME, also one a Python test writes as a string)."""
    out = set()
    for path in files:
        if not is_source(path):
            continue
        text = read(path)
        if path.endswith(("Makefile", ".mk")):
            code = sh_code(text)
            out |= set(re.findall(r"^\s*(?:override\s+|export\s+)?(" + IDENT + r")\s*(?::=|\?=|\+=|=)", code, re.M))
            out |= set(re.findall(r"\$[({](" + IDENT + r")[)}]", code))
            out |= set(re.findall(r"\bif(?:n?def)\s+(" + IDENT + ")", code))
        elif path.endswith((".h", ".c", ".cu", ".cpp")):
            out |= set(re.findall(r'\b\w*env\w*\(\s*"(' + IDENT + ')"', text))
        elif path.endswith(".py"):
            out |= set(re.findall(r"(?:environ\.get|environ\.setdefault|getenv)\(\s*[\"'](" + IDENT + ")", text))
            out |= set(re.findall(r"environ\[\s*[\"'](" + IDENT + ")", text))
            out |= set(re.findall(r"\$\{?(" + IDENT + ")", text))  # a shell script the test writes reads $NAME
        else:
            out |= set(re.findall(r"\$\{?(" + IDENT + ")", sh_code(text)))
    return out


def source_notes(path, text):
    """(line, text) of each comment and string of a source file: what the code says in words (C and
    Python: comments and strings; shell and make: comment lines)."""
    if path.endswith((".h", ".c", ".cu", ".cpp")):
        return [(text.count("\n", 0, m.start()) + 1, m.group(0)) for m in C_TOKENS.finditer(text)]
    if path.endswith(".py"):
        try:
            return [(t.start[0], t.string) for t in tokenize.generate_tokens(io.StringIO(text).readline)
                    if t.type in (tokenize.COMMENT, tokenize.STRING)]
        except (tokenize.TokenError, SyntaxError):
            return []
    return [(text.count("\n", 0, m.start()) + 1, m.group(0)) for m in re.finditer(r"^[ \t]*#.*$", text, re.M)]


# NAME=value in words: a make variable or an environment variable (one letter is an equation's, H=4)
SETTING = re.compile(r"(?<![\w$-])([A-Z][A-Z0-9_]+)=(?!=)(?=[\w\"'$(-])")
# other programs' environment that this project's commands set
OTHER_SETTINGS = {"ASAN_OPTIONS": "AddressSanitizer's", "OMPI_ALLOW_RUN_AS_ROOT": "Open MPI's",
                  "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "Open MPI's", "OMP_STACKSIZE": "OpenMP's",
                  "BLAS_INFO": "PyTorch's build description (torch.__config__.show())",
                  "ONEDNN_MAX_CPU_ISA": "oneDNN's (the instruction set its kernels may use)",
                  "KEY": "the placeholder of a KEY=VALUE usage line"}


def setting_problems(where, text, code):
    """Each NAME=value in `text` whose NAME is no make variable or environment variable read here."""
    return ["%s: %s= is no make variable, environment variable or macro read here" % (where, m.group(1))
            for m in SETTING.finditer(text)
            if m.group(1) not in code.settable and m.group(1) not in OTHER_SETTINGS and m.group(1) not in EXTERNAL]


def run_dir_names(code_text):
    """The names of a run directory's files: the ones run_dir_paths joins to the directory, from the
    #define of each (RUN_LOCK "lock"). code_text: the sources without comments, strings kept."""
    macros = dict(re.findall(r'^[ \t]*#[ \t]*define[ \t]+(' + IDENT + r')[ \t]+"([^"]+)"', code_text, re.M))
    body = re.search(r"\brun_dir_paths\([^)]*\)\s*\{(.*?)\n\}", code_text, re.S)
    joined = re.findall(r'"%s/%s",\s*\w+,\s*(' + IDENT + r")\)", body.group(1)) if body else []
    return sorted(macros[n] for n in joined if n in macros)


def run_dir_lists(text, names):
    """(offset, the names) of each list of a run directory's files in a text: three or more of them
    in a row, each perhaps `quoted` and followed by a (remark), joined by commas, "and" or "or"."""
    if not names:
        return []
    item = r"`?(?<![\w./-])(?:%s)(?![\w-])`?(?:\s*\([^()]*\))?" % "|".join(re.escape(n) for n in names)
    lists = re.finditer(item + r"(?:(?:\s*,\s*(?:and\s+|or\s+)?|\s+(?:and|or)\s+)" + item + ")+", text)
    out = []
    for m in lists:
        found = set(re.findall("|".join(re.escape(n) for n in names), re.sub(r"\([^()]*\)", "", m.group(0))))
        if len(found) >= 3:
            out.append((m.start(), found))
    return out


NUMBER_WORDS = {"two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8}


def check_run_dir(page, text, code):
    """A page's list of a run directory's files (a list in words, a table's first column, a count
    of its names) is the one the trainer makes (run_dir_paths)."""
    bad, n_checked, names = [], 0, set(code.run_dir)
    for first, par in paragraphs(text):
        for at, found in run_dir_lists(par, code.run_dir):
            n_checked += 1
            if found != names:
                bad.append("%s:%d: a run directory of %s; the trainer's holds %s" % (page, first + par.count(
                    "\n", 0, at), ", ".join(sorted(found)), ", ".join(sorted(names))))
        if re.search(r"run directory|A run is one directory|`--out`", par):
            for m in re.finditer(r"\b(%s)\s+(?:names|files)\b" % "|".join(NUMBER_WORDS), par):
                n_checked += 1
                if NUMBER_WORDS[m.group(1)] != len(names):
                    bad.append("%s:%d: says %s names; the trainer's run directory holds %d (%s)" % (
                        page, first + par.count("\n", 0, m.start()), m.group(1), len(names), ", ".join(sorted(names))))
    rows = []  # the tables' first cells, table by table
    for n, ln in enumerate(text.splitlines() + [""], 1):
        cell = re.match(r"^\s*\|\s*`([^`|]+)`\s*\|", ln)
        if cell:
            rows.append((n, cell.group(1)))
        elif not ln.lstrip().startswith("|"):
            in_dir = [x for x in rows if x[1] in names]
            if len(in_dir) >= 2:
                n_checked += 1
                listed = {x[1] for x in rows}
                if listed != names:
                    bad.append("%s:%d: a table of a run directory's files lists %s; the trainer's holds %s" % (
                        page, rows[0][0], ", ".join(sorted(listed)), ", ".join(sorted(names))))
            rows = []
    return bad, n_checked


def check_decay_end(page, text, code):
    """Where ./train ends a decay: --help says it is at --steps unless a horizon is given, so a
    trainer's page that gives a decay "over N steps" says in the same paragraph where `--steps` ends it."""
    bad, n_checked = [], 0
    if page not in TRAINER_PAGES or "--steps" not in code.train_defaults.get("--decay-epochs", ""):
        return bad, n_checked
    for first, par in paragraphs(text):
        for m in re.finditer(r"\bdecay\w*\b[^.;]{0,40}?\bover\s+(?:a\s+fixed\s+)?(\d[\d,.]*k?)\s+steps\b", par):
            n_checked += 1
            if "`--steps`" not in par:
                bad.append("%s:%d: a decay over %s steps, but ./train ends it at --steps (--help: --decay-epochs)"
                           % (page, first + par.count("\n", 0, m.start()), m.group(1)))
    return bad, n_checked


# The one place that says when a resume repeats a run bit for bit (the GPU's conditions)
BIT_EXACT = ("doc/gpu.md", "What is bit-exact")


def anchor(heading):
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def check_resume_claim(page, text, code):
    """A page that says resume is bit-exact points to where its conditions are stated (BIT_EXACT)."""
    bad, n_checked = [], 0
    if page == BIT_EXACT[0]:
        return bad, n_checked
    link = os.path.basename(BIT_EXACT[0]) + "#" + anchor(BIT_EXACT[1])
    for first, par in paragraphs(text):
        for m in re.finditer(r"\b[Rr]esum(?:e|es|ing)\s+(?:is|are)\s+(?:bit-exact|exact|bit for bit|byte-identical)",
                             par):
            n_checked += 1
            if link not in par:
                bad.append("%s:%d: says resume is bit-exact without its conditions (link %s)" % (
                    page, first + par.count("\n", 0, m.start()), link))
    return bad, n_checked


def card_problems(page, text, root_files):
    """The reading-order table (its columns file, job, includes) lists the tree as it is: every
    source at the root and every folder of code, and nothing else."""
    top = {p.split("/")[0] + "/" for p in root_files if "/" in p and is_source(p) and not p.startswith(".")}
    want = {p for p in root_files if "/" not in p and p.endswith((".h", ".c", ".cu"))} | top
    listed, header, found = set(), None, False
    for ln in text.splitlines() + [""]:
        cells = [c.strip() for c in ln.strip().strip("|").split("|")] if ln.lstrip().startswith("|") else None
        if cells is None:
            header = None
        elif header is None:
            header = cells
        elif {"file", "job", "includes"} <= set(header) and not set(cells[0]) <= set("-: "):
            found = True
            listed |= set(re.findall(r"`([^`]+)`", cells[0]))
    if not found:
        return ["%s: no reading-order table (columns file, job, includes)" % page]
    return ["%s: the reading-order table %s %s" % (page, what, ", ".join(sorted(names))) for what, names in
            (("lists what the tree does not hold:", listed - want), ("leaves out", want - listed)) if names]


def long_lines(path, text):
    return ["%s:%d: %d columns" % (path, n, len(ln)) for n, ln in enumerate(text.splitlines(), 1) if len(ln) > 120]


def scripts_not_executable():
    """The files git tracks that begin with #! but that a fresh clone checks out without the executable bit (git's
    index mode, which is what a clone gets; outside a git checkout, the file's own mode)."""
    p = subprocess.run(["git", "ls-files", "-s"], capture_output=True, text=True, cwd=ROOT)
    if p.returncode == 0:
        plain = [ln.split(None, 3)[3] for ln in p.stdout.splitlines() if ln.startswith("100644 ")]
    else:
        plain = [f for f in files_matching(["**/*"]) if not f.startswith("build") and not os.access(f, os.X_OK)]
    bad = []
    for path in plain:
        if os.path.isfile(path):
            with open(path, "rb") as fh:
                if fh.read(2) == b"#!":
                    bad.append(path)
    return bad


def include_cycle(includes):
    """A cycle in {file: [files it includes]} as a list of files (first == last), or None: the project's
    headers form a DAG, so each can be read after the ones it includes."""
    state = {}

    def visit(f, path):  # path: the files from the start down to f; state 1: on it, 2: done
        state[f] = 1
        for g in includes.get(f, ()):
            if state.get(g) == 1:
                return path[path.index(g):] + [g]
            if g not in state:
                found = visit(g, path + [g])
                if found:
                    return found
        state[f] = 2
        return None

    for f in sorted(includes):
        if f not in state:
            found = visit(f, [f])
            if found:
                return found
    return None


def project_includes():
    """{file: the project files it includes} for the root's headers and programs and harness/'s files."""
    return {f: re.findall(r'^\s*#\s*include\s+"([^"]+)"', read(f), re.M)
            for f in sorted(glob.glob("*.h") + glob.glob("harness/*.h") + glob.glob("harness/*.cu*") + glob.glob("*.c") +
                            glob.glob("*.cu"))}


CHECKS = (("code names and paths exist", check_names), ("places and calls hold", check_places),
          ("flags exist", check_flags), ("defaults are --help's", check_defaults),
          ("a run directory's files are the trainer's", check_run_dir),
          ("a decay ends where ./train ends it", check_decay_end),
          ("bit-exact resume is said with its conditions", check_resume_claim))


def run_checks(pages, code):
    """Each page through each check: {(page, what): (problems, how many checked)}."""
    return {(p, what): fn(p, t, code) for p, t in pages.items() for what, fn in CHECKS}


def self_check(code):
    """Planted errors, one of each kind, each caught; the same page without them passes."""
    good = ("The loop is `train_main` in `train.h`; `options_from_record` (`run.h`) reads the record.\n"
            "`model_step` → `fast_forward` on the CPU; run.h's `flags` is the table. A run is `--out`\n"
            "(default `out/`). The default small model (a 256-unit mLSTM, batch 32, T = 64, 800 steps).\n"
            "Without `--lr-schedule` the trainer uses LEGW with 2e-3 at a batch of 32. `CKPT_AT_*`,\n"
            "`-DUSE_MPI`, `make test-lab`, `seq-len`. `run.h` (`RunRule`, `data_identity`) is the code;\n"
            "`--seed`, default 1, and `--clip 1` (default). `make gpu GPU_DEBUG=1`, `GPU_DEBUG=1`.\n\n"
            "A run is one directory, `--out`: the trainer owns four names in it, `latest.ckpt`, `best.ckpt`,\n"
            "`train.log` and `lock`. The `puri` rule decays over 100k steps, ended at `--steps`.\n"
            "Resume is bit-exact on the default path ([gpu.md](gpu.md#what-is-bit-exact)).\n\n"
            "| file | what |\n|---|---|\n| `latest.ckpt` | a |\n| `best.ckpt` | b |\n| `train.log` | c |\n"
            "| `lock` | d |\n\n"
            "| file | includes |\n|---|---|\n| `gemm.h` | `mlstm.h` |\n"
            "| `train.cu` | `train.h`, `harness/gpu_harness.cuh`, `train_switches.cu`, `harness/gpu_harness.cu` |\n\n"
            "    ./train --lr 0.002 --steps 10\n"
            "    dev/gpu_check.sh out/\n\n"
            "    --lr X            base learning rate (default 0.002)\n")
    planted = {
        "a made-up name": ("`train_main`", "`train_mian`"),
        "a made-up file": ("`train.h`;", "`trian.h`;"),
        "a name in the wrong file": ("`options_from_record` (`run.h`)", "`options_from_record` (`train.h`)"),
        "a name in the wrong file, the other form": ("run.h's `flags`", "util.h's `flags`"),
        "a call that is not made": ("`model_step` → `fast_forward`", "`model_step` → `mlstm_forward`"),
        "an include the file does not make": ("| `gemm.h` | `mlstm.h` |", "| `gemm.h` | `util.h` |"),
        "an included .cu left out": ("`train_switches.cu`, `harness/gpu_harness.cu` |", "`train_switches.cu` |"),
        "an included .cuh left out": ("`train.h`, `harness/gpu_harness.cuh`,", "`train.h`,"),
        "a glob that matches no name": ("`CKPT_AT_*`", "`CKPT_AS_*`"),
        "a macro that is gone": ("`-DUSE_MPI`", "`-DMLSTM_PLAIN`"),
        "a make target that does not exist": ("`make test-lab`", "`make test-labs`"),
        "a script that does not exist": ("dev/gpu_check.sh out/", "dev/gpu_chek.sh out/"),
        "a run record's flag name that is no flag": ("`seq-len`", "`seq-lenx`"),
        "a name in the wrong file, a third form": ("`run.h` (`RunRule`", "`train.h` (`RunRule`"),
        "a made-up flag of ./train": ("--steps 10", "--stpes 10"),
        "a gone flag of ./train alone": ("`--seed`, default", "`--ckpt`, default"),
        "a default that is not --help's": ("(default `out/`)", "(default `runs/`)"),
        "a flag list's default that is not --help's": ("(default 0.002)", "(default 5e-4)"),
        "a default in the other forms, wrong": ("`--seed`, default 1", "`--seed`, default 2"),
        "a default in the third form, wrong": ("`--clip 1` (default)", "`--clip 0` (default)"),
        "the default model in words, wrong": ("T = 64", "T = 128"),
        "the default schedule in words, wrong": ("with 2e-3 at", "with 5e-4 at"),
        "a make variable that is no variable": ("`make gpu GPU_DEBUG=1`", "`make gpu PRECISION=FP32`"),
        "a setting that nothing reads": ("`GPU_DEBUG=1`.", "`PRECISION=FP32`."),
        "a run directory listed short": ("`train.log` and `lock`", "and `train.log`"),
        "a run directory's files miscounted": ("four names", "three names"),
        "a run directory's table short": ("| `lock` | d |\n", ""),
        "a run directory's table with a file too many": ("| `lock` | d |\n", "| `lock` | d |\n| `run.pid` | e |\n"),
        "a decay over N steps that ./train ends elsewhere": (", ended at `--steps`", ""),
        "bit-exact resume without its conditions": (" ([gpu.md](gpu.md#what-is-bit-exact))", ""),
    }
    page = "doc/training.md"
    clean = [x for v in run_checks({page: good}, code).values() for x in v[0]]
    check(not clean, "self-check: the clean page passes%s" % (": " + "; ".join(clean) if clean else ""))
    for what, (old, new) in planted.items():
        assert old in good, what
        found = [x for v in run_checks({page: good.replace(old, new)}, code).values() for x in v[0]]
        check(len(found) >= 1, "self-check: %s is caught (%s)" % (what, "; ".join(found) or "missed"))
    check(setting_problems("x", "// the PRECISION=FP32 build", code) and
          not setting_problems("x", "// make gpu GPU_DEBUG=1, MLSTM_SPLITK=1 in the environment", code),
          "self-check: a comment's PRECISION=FP32 (no make variable) is caught, GPU_DEBUG=1 and MLSTM_SPLITK=1 are not")
    design = read("doc/design.md")
    row = re.search(r"^\| `tools/` \|.*\n", design, re.M)
    check(row and not card_problems("x", design, code.files) and card_problems("x", design.replace(row.group(0), ""),
          code.files) and card_problems(
          "x", design.replace(row.group(0), row.group(0) * 2).replace("`tools/`", "`harness.h`", 1), code.files),
          "self-check: the reading-order table without its tools/ row, or with a file the tree lacks, is caught")
    check(len(long_lines("x", "x" * 121)) == 1 and not long_lines("x", "x" * 120 + "\n" + "é" * 120),
          "self-check: a line of 121 columns is caught, 120 (in ASCII or not) are not")


def main():
    os.chdir(ROOT)
    build = os.environ.get("BUILD", "build")
    trainer = os.path.join(ROOT, build, "train")
    r = subprocess.run([trainer, "--help"], capture_output=True, text=True) if os.access(trainer, os.X_OK) else None
    help_text = r.stdout if r and r.returncode == 0 else ""
    check(help_text.count("\n  --") > 20, "%s --help lists the flags (%d lines; make test builds it first)"
          % (os.path.join(build, "train"), help_text.count("\n")))
    code = Code(help_text)
    check(len(code.words) > 3000 and len(code.train_defaults) > 20,
          "the code read: %d words, %d source files, %d defaults in --help" % (len(code.words), len(code.defs),
                                                                             len(code.train_defaults)))
    self_check(code)
    check(len(code.run_dir) >= 3, "the run directory's files, from run_dir_paths: %s" % ", ".join(code.run_dir))
    helped = run_dir_lists(" ".join(help_text.split()), code.run_dir)
    check(helped and all(found == set(code.run_dir) for _, found in helped),
          "%s --help names the run directory's files as run_dir_paths makes them (%s)" % (
              os.path.join(build, "train"), "; ".join(", ".join(sorted(f)) for _, f in helped) or "no list"))
    bad = [x for p, n, t in code.notes for x in setting_problems("%s:%d" % (p, n), t, code)]
    check(not bad, "the code's comments and messages name as NAME=value only what the Makefile or a program reads "
          "(%d of them)%s" % (len(code.notes), "".join("\n      " + b for b in bad)))
    bad = card_problems("doc/design.md", read("doc/design.md"), code.files)
    check(not bad, "doc/design.md's reading-order table lists the root's sources and folders of code%s"
          % "".join("\n      " + b for b in bad))
    check(anchor(BIT_EXACT[1]) in {anchor(h) for h in re.findall(r"^#+\s+(.*)$", read(BIT_EXACT[0]), re.M)},
          "%s has the section the pages point to for bit-exact resume, \"%s\"" % BIT_EXACT)
    pages = {p: read(p) for p in doc_pages()}
    results = run_checks(pages, code)
    for what, _ in CHECKS:
        for p in pages:
            bad, n = results[(p, what)]
            check(not bad, "%s: %s (%d checked)%s" % (p, what, n, "".join("\n      " + b for b in bad)))
    cycle = include_cycle(project_includes())
    check(cycle is None, "the root's includes form a DAG (no header includes one that includes it)%s"
          % ("" if cycle is None else ": " + " -> ".join(cycle)))
    planted = include_cycle({"a.h": ["b.h"], "b.h": ["c.h"], "c.h": ["a.h"], "d.h": ["a.h"]})
    check(planted is not None and planted[0] == planted[-1] and set(planted) == {"a.h", "b.h", "c.h"},
          "self-check: a planted include cycle is found (%s)" % (planted and " -> ".join(planted)))
    core = sorted(set(files_matching(CORE_LINES)))
    bad = [x for p in core for x in long_lines(p, read(p))]
    check(not bad, "the core sources (%d files) keep within 120 columns%s"
          % (len(core), "".join("\n      " + b for b in bad)))
    bad = scripts_not_executable()
    check(not bad, "every script (a tracked file that begins with #!) is executable in a clone: %s"
          % (", ".join(bad) or "all are"))
    summary("test_docs")


if __name__ == "__main__":
    main()
