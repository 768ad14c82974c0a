#!/usr/bin/env python3
"""Measures the layout of a crate's src/: files and lines per folder (non-test and
test lines apart), the largest non-test file, and the import cycles between its
files and folders (from `use crate::…`, `super::…` and inline `crate::…` paths,
following `pub use` re-exports to the module that defines the item).

usage: python3 .ci/core-layout.py core/src [--depth N] [--check]

The agent's folders are layers, listed bottom to top under "# Layers" in the module doc
of agent/mod.rs ("1. `permissions/`: …"). The last section checks every import between
folders of agent/ against that list: a folder may import only folders listed before it
(and the files directly in agent/, the façade on top of them all). With --check only that
section is printed, and the exit status is 1 when an import goes against the list, a
folder of agent/ is missing from it, or folders of agent/ import each other in a circle.
An import there is a path, as above, or a name used bare in a module that imports
`crate::agent::*`: the façade's imports and re-exports, each counted for the module
that defines it.

A file counts as tests when it is tests.rs, *_tests.rs, test_support.rs or under a
tests/ folder; in other files a `#[cfg(test)]` module counts as tests. Cycles are
counted over non-test modules only; at a folder depth, a folder and its ancestors are
one room (a child naming its parent's items is not a cycle across folders).
"""
import os
import re
import sys
from collections import defaultdict

SRC = sys.argv[1].rstrip("/")
DEPTH = 2
CHECK = "--check" in sys.argv
if "--depth" in sys.argv:
    DEPTH = int(sys.argv[sys.argv.index("--depth") + 1])


def out(*args, **kwargs):
    """Prints the measuring sections (not with --check)."""
    if not CHECK:
        print(*args, **kwargs)


def is_test_file(path):
    b = os.path.basename(path)
    return b == "tests.rs" or b.endswith("_tests.rs") or b == "test_support.rs" or "/tests/" in path


def split_lines(path):
    """(non-test lines, test lines) of one file."""
    lines = open(path, encoding="utf-8").read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if is_test_file(path):
        return 0, len(lines)
    test = 0
    i = 0
    while i < len(lines):
        if lines[i].strip() == "#[cfg(test)]" and i + 1 < len(lines):
            j = i + 1
            while j < len(lines) and lines[j].startswith("#["):
                j += 1
            if j < len(lines) and re.match(r"\s*(pub(\(\w+\))? )?mod \w+;", lines[j]):
                test += j - i + 1
                i = j + 1
                continue
            if j < len(lines) and re.match(r"(pub(\(\w+\))? )?mod \w+ \{", lines[j]):
                k = j + 1
                while k < len(lines) and lines[k] != "}":
                    k += 1
                test += k - i + 1
                i = k + 1
                continue
        i += 1
    return len(lines) - test, test


files = []
for root, _, names in os.walk(SRC):
    for n in names:
        if n.endswith(".rs"):
            files.append(os.path.join(root, n))
files.sort()

# ---- lines per folder
per = defaultdict(lambda: [0, 0, 0])
largest = []
for f in files:
    nt, t = split_lines(f)
    folder = os.path.dirname(f)
    per[folder][0] += 1
    per[folder][1] += nt
    per[folder][2] += t
    largest.append((nt, f))
out("## files and lines per folder (non-test / test)")
out(f"{'folder':40} {'files':>5} {'non-test':>9} {'test':>7}")
tot = [0, 0, 0]
for k in sorted(per):
    v = per[k]
    out(f"{k:40} {v[0]:5} {v[1]:9} {v[2]:7}")
    for i in range(3):
        tot[i] += v[i]
out(f"{'total':40} {tot[0]:5} {tot[1]:9} {tot[2]:7}")
largest.sort(reverse=True)
out("\n## largest non-test files")
for nt, f in largest[:5]:
    out(f"{nt:6} {f}")

# ---- module tree
def modpath(f):
    rel = os.path.relpath(f, SRC)[:-3].split(os.sep)
    if rel[-1] in ("mod", "lib"):
        rel = rel[:-1]
    return tuple(rel)


# modules declared with #[path] are children of the declaring module
mods = {}
for f in files:
    mods[modpath(f)] = f
for f in files:
    text = open(f, encoding="utf-8").read()
    for m in re.finditer(r'#\[path = "([^"]+)"\]\s*(?:pub(?:\(\w+\))? )?mod (\w+);', text):
        target = os.path.normpath(os.path.join(os.path.dirname(f), m.group(1)))
        mp = modpath(f)
        if os.path.basename(f) not in ("mod.rs", "lib.rs"):
            mp = mp  # child of a file module
        new = mp + (m.group(2),)
        old = modpath(target)
        if old in mods and mods[old] == target:
            del mods[old]
        mods[new] = target
file_of = mods
mod_of_file = {v: k for k, v in mods.items()}
test_mods = {k for k, v in mods.items() if is_test_file(v)}


def strip_comments(text):
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', text)
    return text


def expand_use(tree):
    """`a::{b, c::{d, e}}` -> [[a,b],[a,c,d],[a,c,e]]"""
    tree = re.sub(r"\s+as\s+\w+", "", tree)
    tree = re.sub(r"\s+", "", tree)
    out = []

    def rec(prefix, s):
        # split s at top-level commas
        parts, depth, cur = [], 0, ""
        for ch in s:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        if cur:
            parts.append(cur)
        for p in parts:
            if "{" in p:
                head, rest = p.split("{", 1)
                rest = rest[: rest.rindex("}")]
                hp = [x for x in head.split("::") if x]
                rec(prefix + hp, rest)
            else:
                out.append(prefix + [x for x in p.split("::") if x])

    rec([], tree)
    return out


def absolute(mp, path, is_modrs):
    """Resolve a path seen in module mp to an absolute crate path (list)."""
    if not path:
        return None
    if path[0] == "crate":
        return list(path[1:])
    base = list(mp)
    i = 0
    if path[0] == "self":
        return base + list(path[1:])
    if path[0] == "super":
        while i < len(path) and path[i] == "super":
            base = base[:-1]
            i += 1
        return base + list(path[i:])
    return None


# items re-exported by `pub use` in each module: name -> absolute path
reexports = defaultdict(dict)
uses = defaultdict(list)  # module -> list of absolute paths
for mp, f in mods.items():
    text = strip_comments(open(f, encoding="utf-8").read())
    for m in re.finditer(r"(pub(?:\([\w ]+\))?\s+)?\buse\s+([^;]+);", text):
        for p in expand_use(m.group(2)):
            a = absolute(mp, p, False)
            if a is None and p and p[0] in [x[-1] for x in mods if x and x[:-1] == mp]:
                a = list(mp) + p  # `use child::X` from a parent
            if a is None:
                continue
            uses[mp].append(a)
            if m.group(1) and m.group(1).startswith("pub") and p and p[-1] not in ("*", "self"):
                reexports[mp][p[-1]] = a
            if m.group(1) and m.group(1).startswith("pub") and p and p[-1] == "*":
                reexports[mp].setdefault("*", []).append(a[:-1])
    for m in re.finditer(r"\b(crate|super)((?:::\w+)+)", text):
        p = [m.group(1)] + [x for x in m.group(2).split("::") if x]
        a = absolute(mp, p, False)
        if a is not None:
            uses[mp].append(a)


def resolve(a, depth=0):
    """Absolute path -> module that defines it."""
    a = [x for x in a if x not in ("self",)]
    best = ()
    for i in range(len(a), -1, -1):
        if tuple(a[:i]) in mods:
            best = tuple(a[:i])
            break
    rest = a[len(best):]
    if rest and depth < 8:
        name = rest[0]
        r = reexports.get(best, {})
        if name in r and name != "*":
            return resolve(r[name] + rest[1:], depth + 1)
        for star in r.get("*", []):
            t = resolve(star + rest, depth + 1)
            if t != tuple(star) and t is not None and len(t) > len(star):
                return t
            # glob target module itself may define it
    return best


edges = defaultdict(set)
for mp, ps in uses.items():
    if mp in test_mods:
        continue
    for a in ps:
        t = resolve(a)
        if t is not None and t != mp and t not in test_mods and t != ():
            edges[mp].add(t)


def sccs(nodes, edges):
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    sys.setrecursionlimit(10000)

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            strong(v)
    return [c for c in out if len(c) > 1]


def show(m):
    return "::".join(m) if m else "crate"


def folder_of(m, depth):
    f = mods[m]
    rel = os.path.relpath(os.path.dirname(f), SRC).split(os.sep)
    rel = [x for x in rel if x != "."]
    if not rel:
        return os.path.basename(f)[:-3]  # a root file is its own node
    return "/".join(rel[:depth])


nodes = [m for m in mods if m not in test_mods and m != ()]
out("\n## file-level import cycles (non-test modules)")
cs = sccs(nodes, edges)
for c in cs:
    out(f"{len(c)} modules: " + ", ".join(show(x) for x in c))
if not cs:
    out("none")

for depth in range(1, DEPTH + 1):
    fe = defaultdict(set)
    for a, bs in edges.items():
        if a == ():
            continue
        fa = folder_of(a, depth)
        for b in bs:
            fb = folder_of(b, depth)
            if fa == fb:
                continue
            # a folder and its own parent's files are one room at this depth
            if fa.startswith(fb + "/") or fb.startswith(fa + "/"):
                continue
            fe[fa].add(fb)
    fnodes = {folder_of(m, depth) for m in nodes}
    out(f"\n## folder-level import cycles, folders to depth {depth}")
    cs = sccs(fnodes, fe)
    for c in cs:
        out(f"{len(c)} folders: " + ", ".join(c))
        # the edges that close it
        for a in c:
            for b in sorted(fe[a]):
                if b in c:
                    why = sorted(
                        {
                            f"{show(x)} -> {show(y)}"
                            for x in nodes
                            if folder_of(x, depth) == a
                            for y in edges.get(x, ())
                            if folder_of(y, depth) == b
                        }
                    )
                    out(f"    {a} -> {b}: " + "; ".join(why[:6]) + (" …" if len(why) > 6 else ""))
    if not cs:
        out("none")


# ---- the agent's layers
AGENT = "agent"


def agent_layers():
    """The folders of agent/ as its module doc lists them under `# Layers`, bottom first."""
    path = os.path.join(SRC, AGENT, "mod.rs")
    if not os.path.exists(path):
        return None
    order, inside = [], False
    for line in open(path, encoding="utf-8"):
        if not line.startswith("//!"):
            break
        text = line[3:].strip()
        if text.startswith("#"):
            inside = text == "# Layers"
            continue
        m = re.match(r"\d+\. `(\w+)/`", text)
        if inside and m:
            order.append(f"{AGENT}/{m.group(1)}")
    return order


def without_tests(text):
    """The text of a file without its `#[cfg(test)]` inline modules."""
    out, skip = [], False
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if skip:
            skip = line != "}"
            continue
        if line.strip() == "#[cfg(test)]" and i + 1 < len(lines) and re.match(r"(pub(\(\w+\))? )?mod \w+ \{", lines[i + 1]):
            skip = True
            continue
        out.append(line)
    return "\n".join(out)


def item_names(m):
    """The items (not modules) a module defines at its top level."""
    text = without_tests(strip_comments(open(mods[m], encoding="utf-8").read()))
    pat = r"^(?:pub(?:\([\w: ]+\))?\s+)?(?:struct|enum|trait|type|const|static|fn)\s+(\w+)"
    return set(re.findall(pat, text, re.M))


def glob_names_used(root):
    """(module, module defining the name, name) for each name a module of `root`'s
    folders uses bare after importing `root::*`."""
    text = without_tests(strip_comments(open(mods[root], encoding="utf-8").read()))
    names = {}
    for m in re.finditer(r"\buse\s+([^;]+);", text):
        for p in expand_use(m.group(1)):
            a = absolute(root, p, False)
            if a is None and p and (tuple(root) + (p[0],)) in mods:
                a = list(root) + p
            elif a is None and p and p[0] in reexports.get(root, {}):
                a = reexports[root][p[0]] + p[1:]
            if a is None or p[-1] == "self":
                continue
            if p[-1] == "*":
                target = resolve(a[:-1])
                for n in item_names(target):
                    names.setdefault(n, target)
                for n, r in reexports.get(target, {}).items():
                    if n != "*":
                        names.setdefault(n, resolve(r))
            else:
                t = resolve(a)
                if t is not None and (t + (p[-1],)) not in mods:
                    names[p[-1]] = t
    for n in item_names(root):
        names[n] = root
    out = set()
    for m in nodes:
        if len(m) < 2 or m[: len(root)] != root:
            continue
        text = without_tests(strip_comments(open(mods[m], encoding="utf-8").read()))
        globbed = False
        own = item_names(m)
        for u in re.finditer(r"\buse\s+([^;]+);", text):
            for p in expand_use(u.group(1)):
                if p and p[-1] == "*" and absolute(m, p[:-1], False) == list(root):
                    globbed = True
                elif p:
                    own.add(p[-1])
        if not globbed:
            continue
        for n in set(re.findall(r"(?<![\w:.])([A-Za-z_]\w*)\b", text)):
            b = names.get(n)
            if b is not None and n not in own and b != m:
                out.add((m, b, n))
    return sorted(out)


layers = agent_layers()
if layers is not None:
    failed = []
    print(f"\n## the agent's layers ({AGENT}/mod.rs, \"# Layers\"), bottom to top")
    for i, f in enumerate(layers, 1):
        print(f"{i:4} {f}")
    print(f"{len(layers) + 1:4} {AGENT} (the façade: the files directly in {AGENT}/)")
    folders = {folder_of(m, 2) for m in nodes} - {AGENT}
    folders = {f for f in folders if f.startswith(AGENT + "/")}
    for f in sorted(folders - set(layers)):
        failed.append(f"{f} is not in the list")
    for f in layers:
        if f not in folders:
            failed.append(f"{f} is listed but holds no (non-test) module")
    rank = {f: i for i, f in enumerate(layers)}
    against = defaultdict(set)
    inner = defaultdict(set)

    def edge(a, b, how):
        fa, fb = folder_of(a, 2), folder_of(b, 2)
        if fa == fb or fa not in folders or fb not in folders:
            return
        inner[fa].add(fb)
        if fa in rank and fb in rank and rank[fb] > rank[fa]:
            against[(fa, fb)].add(f"{show(a)} -> {show(b)}{how}")

    for a in nodes:
        for b in edges.get(a, ()):
            edge(a, b, "")
    # A capability's `use crate::agent::*` (or `use super::*` from a folder's mod.rs)
    # brings in every name the façade imports or re-exports: a name used bare that way
    # names the module that defines it.
    for m, b, name in glob_names_used((AGENT,)):
        edge(m, b, f" (`{name}`, through `use crate::{AGENT}::*`)")
    for (fa, fb), why in sorted(against.items()):
        failed.append(f"{fa} imports {fb}, above it: " + "; ".join(sorted(why)))
    for c in sccs(folders, inner):
        failed.append(f"{len(c)} folders import each other in a circle: " + ", ".join(c))
    if failed:
        print("against the list:")
        for f in failed:
            print("    " + f)
    else:
        print("every import between folders of agent/ goes down the list")
    if CHECK and failed:
        sys.exit(1)
elif CHECK:
    print(f"{SRC}/{AGENT}/mod.rs not found: nothing to check")
    sys.exit(1)
