"""Shell completions and the man page, generated from the command line's definition:
bash completes vecgate's subcommands and options, and groff (with preconv, as man runs it)
renders the man page without warnings."""
import subprocess


def test_bash_completion_completes_subcommands_and_options(vecgate, tmp_path):
    script = subprocess.run([str(vecgate), "completions", "bash"], capture_output=True, text=True, timeout=20, check=True).stdout
    (tmp_path / "vg.bash").write_text(script)
    probe = f"""
source {tmp_path / 'vg.bash'}
COMP_WORDS=(vecgate ""); COMP_CWORD=1; _vecgate vecgate "" vecgate; echo "SUB ${{COMPREPLY[*]}}"
COMP_WORDS=(vecgate run --); COMP_CWORD=2; _vecgate vecgate -- run; echo "RUN ${{COMPREPLY[*]}}"
"""
    out = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=20).stdout
    sub = next(l for l in out.splitlines() if l.startswith("SUB ")).split()
    run = next(l for l in out.splitlines() if l.startswith("RUN ")).split()
    assert {"run", "ctl", "pcap", "bench", "trafgen", "completions", "man"} <= set(sub), out
    assert {"--config", "--socket", "--metrics", "--duration"} <= set(run), out


def test_man_page_renders_without_warnings(vecgate):
    roff = subprocess.run([str(vecgate), "man"], capture_output=True, text=True, timeout=20, check=True).stdout
    r = subprocess.run(["groff", "-k", "-man", "-Tutf8", "-ww", "-z"], input=roff, capture_output=True, text=True, timeout=20)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    text = subprocess.run(["groff", "-k", "-man", "-Tutf8"], input=roff, capture_output=True, text=True, timeout=20).stdout
    for word in ["vecgate", "run", "ctl", "bench", "trafgen"]:
        assert word in text


def test_an_older_cpu_gets_a_message_not_sigill(vecgate):
    """The build targets x86-64-v3; under qemu-user with a CPU model that lacks AVX
    (Westmere) vecgate must name the missing feature and exit 1, not die of SIGILL. On
    a v3 model (Haswell) it runs."""
    import shutil
    qemu = shutil.which("qemu-x86_64")
    assert qemu, "qemu-user is installed by scripts/test.sh"
    old = subprocess.run([qemu, "-cpu", "Westmere", str(vecgate), "--version"], capture_output=True, text=True, timeout=60)
    assert old.returncode == 1, (old.returncode, old.stderr[-500:])
    assert "this CPU lacks avx" in old.stderr and "x86-64-v3" in old.stderr, old.stderr
    new = subprocess.run([qemu, "-cpu", "Haswell", str(vecgate), "--version"], capture_output=True, text=True, timeout=60)
    assert new.returncode == 0 and "vecgate" in new.stdout, new.stderr[-500:]


def test_the_docs_toml_examples_parse():
    """Every ```toml block of the README and docs/ is valid TOML as written (an operator
    copies them; an inline table spread over lines is not)."""
    import re
    import tomllib
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    blocks = 0
    for doc in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        for m in re.finditer(r"^```toml\n(.*?)^```", doc.read_text(), re.S | re.M):
            blocks += 1
            line = doc.read_text()[:m.start()].count("\n") + 1
            try:
                tomllib.loads(m.group(1))
            except tomllib.TOMLDecodeError as e:
                raise AssertionError(f"{doc.name}:{line}: {e}") from None
    assert blocks >= 4


# What a fragment of the docs (an `[lb]` or SPD example, no interface of its own) is
# checked beside: the two links the examples name, with the addresses they use.
DOCS_BASE = """[[interface]]
name = "eth0"
type = "pg"
mac = "02:00:00:00:00:01"
addresses = ["198.18.0.1/24", "2001:db8::1/64"]

[[interface]]
name = "eth1"
type = "pg"
mac = "02:00:00:00:00:02"
addresses = ["198.18.1.1/24", "2001:db8:1::1/64"]

"""


def test_the_docs_toml_examples_load(vecgate, tmp_path):
    """Every ```toml block of the README and docs/ passes `vecgate check` as an operator
    copies it: a block with an `[[interface]]` as a whole file, a fragment after the two
    links the examples name; so do the shipped example files."""
    import re
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    files = []
    for doc in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        text = doc.read_text()
        for m in re.finditer(r"^```toml\n(.*?)^```", text, re.S | re.M):
            line = text[:m.start()].count("\n") + 1
            block = m.group(1)
            f = tmp_path / f"{doc.stem}-{line}.toml"
            f.write_text(block if "[[interface]]" in block else DOCS_BASE + block)
            files.append(f)
    files += sorted((root / "docs" / "examples").glob("*.toml")) + [root / "packaging" / "vecgate.toml"]
    assert len(files) >= 7
    bad = []
    for f in files:
        r = subprocess.run([str(vecgate), "check", "--config", str(f)], capture_output=True, text=True, timeout=30)
        if r.returncode != 0 or not r.stdout.endswith(": ok\n"):
            bad.append(r.stderr.strip() or r.stdout.strip())
    assert not bad, "\n".join(bad)


def test_every_option_of_every_subcommand_says_what_it_is(vecgate):
    """`vecgate <cmd> --help` describes each option (an option listed with only its name and
    default leaves the reader to guess what --position or --src is)."""
    import re
    top = subprocess.run([str(vecgate), "--help"], capture_output=True, text=True, timeout=30).stdout
    cmds = re.findall(r"^  ([a-z0-9]+)\s{2,}", top.split("Commands:")[1].split("Options:")[0], re.M)
    assert {"run", "ctl", "check", "pcap", "bench", "trafgen", "k8s"} <= set(cmds), cmds
    bare = []
    for cmd in [c for c in cmds if c != "help"]:
        out = subprocess.run([str(vecgate), cmd, "--help"], capture_output=True, text=True, timeout=30).stdout
        lines = out.split("Options:\n", 1)[1].splitlines()
        for i, line in enumerate(lines):
            m = re.match(r"^ {2,6}(?:-\w, )?(--[\w-]+)(?: <[^>]+>)?(?:\.\.\.)?(?:\s{2,}(.*))?$", line)
            if not m or m.group(1) in ("--help", "--version"):
                continue
            # The description is on the line, or (clap's long layout) on the lines below.
            text = m.group(2) or ""
            for nxt in lines[i + 1:]:
                if not nxt.startswith(" " * 10) or nxt.strip().startswith("-"):
                    break
                text += " " + nxt.strip()
            if not re.sub(r"\[(default|possible values): [^\]]*\]", "", text).strip():
                bare.append(f"vecgate {cmd} {m.group(1)}")
    assert not bare, "options without a description: " + ", ".join(bare)


def test_the_readme_cli_table_names_only_options_that_exist(vecgate):
    """Each option README's CLI table gives a subcommand (`-c`, as VPP's `-c startup.conf`,
    included) is in that subcommand's --help, and `-c` works."""
    import re
    from pathlib import Path
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    rows = re.findall(r"^\| `vecgate (\w+) ([^`]*)` \|", readme, re.M)
    assert len(rows) >= 6, rows
    missing = []
    for cmd, usage in rows:
        helptext = subprocess.run([str(vecgate), cmd, "--help"], capture_output=True, text=True, timeout=30).stdout
        for opt in re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", usage):
            if not re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", helptext):
                missing.append(f"vecgate {cmd} {opt}")
    assert not missing, missing
    cfg = Path(__file__).resolve().parent.parent / "docs" / "examples" / "default-gateway.toml"
    r = subprocess.run([str(vecgate), "check", "-c", str(cfg)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and r.stdout == f"{cfg}: ok\n", r
