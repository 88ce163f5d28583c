#!/usr/bin/env python3
"""The layering rule of docs/architecture.md ("Layers"), checked.

Usage: check_layers.py SOURCE_ROOT

Every C++ file under SOURCE_ROOT (but tests/, fuzz/, build*/ and hidden
folders) belongs to the component whose folder is the longest prefix of its
path. Each `#include` of a project file ("a/b/c.h", from the source root) must
name an existing file of the same component or of a component the including
one may include; a component's `internal/` subfolders are for that component
alone. Each component folder's CMakeLists.txt may link (target_link_libraries)
only the kvpeer_* libraries of those components. Exit status 0 with a summary
line when all holds, 1 with one line per violation otherwise, 2 when the table
below is itself wrong. Python 3 standard library only.
"""

import fnmatch
import os
import re
import sys

# ---------------------------------------------------------------------------
# THE TABLE: the only thing to edit when the tree changes.
#
# component folder -> the components its files may include and its libraries
# may link (a component may always include itself). Nothing is implied: list
# every component a folder uses, lower layers included. A file belongs to the
# component whose folder is the longest prefix of its path.
#
# daemon/ is split into libraries of its own (docs/architecture.md, "The
# parts of the daemon"): the control API's vocabulary (api), metrics, the node
# and the seam between the node's two sides (node), the engine side
# (control) and the peer side (peer); daemon/ itself only composes them.
COMPONENTS = {
    "base": [],
    "protocol": ["base"],
    "session": ["base", "protocol"],
    # Beside the stack: settings and files, with the wire's peer_id syntax,
    # feature names and JSON field readers.
    "config": ["base", "protocol"],
    "daemon/api": ["base", "protocol"],
    "daemon/metrics": ["base", "protocol", "session", "daemon/api"],
    "daemon/node": ["base", "protocol", "session", "daemon/api", "daemon/metrics"],
    "daemon/control": ["base", "protocol", "session", "config", "daemon/api", "daemon/metrics", "daemon/node"],
    "daemon/peer": ["base", "protocol", "session", "config", "daemon/api", "daemon/metrics", "daemon/node"],
    "daemon": ["base", "protocol", "session", "config", "daemon/api", "daemon/metrics", "daemon/node",
               "daemon/control", "daemon/peer"],
    # kvpeerctl speaks the control API; from config it takes the default
    # socket path, host:port syntax, Printable and version.h, never the daemon.
    "cli": ["base", "config"],
    # The C++ engines' client: control-api.md over the socket, nothing of
    # the daemon, so engines link it alone.
    "clients/cpp": [],
    # kvpeer-bench talks to daemons only through their sockets (with the
    # engines' client) and /proc.
    "bench": ["clients/cpp"],
}

# CMake library -> its component, for the target_link_libraries check.
LIBRARIES = {
    "kvpeer_base": "base",
    "kvpeer_protocol": "protocol",
    "kvpeer_session": "session",
    "kvpeer_config": "config",
    "kvpeer_api": "daemon/api",
    "kvpeer_metrics": "daemon/metrics",
    "kvpeer_node": "daemon/node",
    "kvpeer_control": "daemon/control",
    "kvpeer_peer": "daemon/peer",
    "kvpeer_daemon": "daemon",
    "kvpeer_cli": "cli",
    "kvpeer_client": "clients/cpp",
}

# Installed headers included as <prefix/...> or "prefix/..." -> the folder
# under the source root that holds them.
INCLUDE_ROOTS = {
    "kvpeer/": "clients/cpp/include/kvpeer/",
}

# Headers generated at configure time -> the template they come from.
GENERATED = {
    "config/version.h": "config/version.h.in",
}

# Top-level folders not scanned (shell patterns); hidden folders never are.
EXCLUDED = ["tests", "fuzz", "build*"]
SOURCE_SUFFIXES = (".h", ".hh", ".hpp", ".cc", ".cpp", ".cxx")
# ---------------------------------------------------------------------------

INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
LINK_RE = re.compile(r"\btarget_link_libraries\s*\(([^)]*)\)", re.S)
LIBRARY_RE = re.compile(r"^kvpeer_[A-Za-z0-9_]+$")


def component_of(path):
    """The component of a source-root-relative path, or None."""
    best = None
    for folder in COMPONENTS:
        if path.startswith(folder + "/") and (best is None or len(folder) > len(best)):
            best = folder
    return best


def internal_owner(path):
    """The component owning an internal/ folder on path, or None."""
    parts = path.split("/")
    if "internal" in parts[:-1]:
        return component_of(path)
    return None


def check_table(root):
    errors = []
    for folder, allowed in COMPONENTS.items():
        if not os.path.isdir(os.path.join(root, folder)):
            errors.append(f"table: component folder {folder}/ does not exist")
        for other in allowed:
            if other not in COMPONENTS:
                errors.append(f"table: {folder} may include {other}, which is no component")
    for library, folder in LIBRARIES.items():
        if folder not in COMPONENTS:
            errors.append(f"table: library {library} belongs to {folder}, which is no component")
    # The allowed graph must have no cycle: layers, not a web.
    state = {}

    def visit(node, trail):
        state[node] = "open"
        for other in COMPONENTS.get(node, []):
            if other == node or other not in COMPONENTS:
                continue
            if state.get(other) == "open":
                errors.append("table: cycle " + " -> ".join(trail + [other]))
            elif other not in state:
                visit(other, trail + [other])
        state[node] = "done"

    for node in COMPONENTS:
        if node not in state:
            visit(node, [node])
    return errors


def source_files(root):
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root).replace(os.sep, "/")
        kept = []
        for d in sorted(dirnames):
            if d.startswith("."):
                continue
            if rel_dir == "." and any(fnmatch.fnmatch(d, p) for p in EXCLUDED):
                continue
            kept.append(d)
        dirnames[:] = kept
        for name in sorted(filenames):
            if name.endswith(SOURCE_SUFFIXES):
                yield name if rel_dir == "." else rel_dir + "/" + name


def may_include(src_comp, target, target_comp):
    if target_comp is None:
        return False
    owner = internal_owner(target)
    if owner is not None:
        return owner == src_comp
    return target_comp == src_comp or target_comp in COMPONENTS[src_comp]


def check_includes(root, rel, comp, errors):
    count = 0
    with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            m = INCLUDE_RE.match(line)
            if not m:
                continue
            bracket, target = m.group(1), m.group(2).strip()
            for prefix, folder in INCLUDE_ROOTS.items():
                if target.startswith(prefix):
                    target = folder + target[len(prefix):]
            first = target.split("/")[0]
            if bracket == "<" and component_of(first + "/x") is None:
                continue  # a system or third-party header
            count += 1
            norm = os.path.normpath(target).replace(os.sep, "/")
            exists = not norm.startswith("../") and (
                os.path.isfile(os.path.join(root, norm)) or
                (norm in GENERATED and os.path.isfile(os.path.join(root, GENERATED[norm]))))
            if not exists:
                errors.append(f"{rel}:{lineno}: includes {target}, which names no file "
                              f"(project includes are written from the source root)")
                continue
            target_comp = component_of(norm)
            if not may_include(comp, norm, target_comp):
                what = target_comp or "no component"
                if target_comp is not None and internal_owner(norm) is not None:
                    what += ", internal"
                errors.append(f"{rel}:{lineno}: {comp} may not include {norm} ({what})")
    return count


def check_links(root, errors):
    count = 0
    for folder in COMPONENTS:
        rel = folder + "/CMakeLists.txt"
        path = os.path.join(root, rel)
        if not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        # Drop comments, keeping line breaks so that line numbers hold.
        text = re.sub(r"#[^\n]*", "", text)
        for m in LINK_RE.finditer(text):
            lineno = text.count("\n", 0, m.start()) + 1
            words = m.group(1).split()
            if not words:
                continue
            # A library's own component when the table knows it; an
            # executable belongs to its folder's component.
            src_comp = LIBRARIES.get(words[0], folder)
            for word in words[1:]:
                if not LIBRARY_RE.match(word):
                    continue
                count += 1
                if word not in LIBRARIES:
                    errors.append(f"{rel}:{lineno}: {words[0]} links {word}, which is in no "
                                  f"component (add it to LIBRARIES)")
                    continue
                lib_comp = LIBRARIES[word]
                if lib_comp != src_comp and lib_comp not in COMPONENTS[src_comp]:
                    errors.append(f"{rel}:{lineno}: {src_comp} may not link {word} ({lib_comp})")
    return count


def main(argv):
    if len(argv) != 2 or not os.path.isdir(argv[1]):
        print("usage: check_layers.py SOURCE_ROOT", file=sys.stderr)
        return 2
    root = argv[1]
    table_errors = check_table(root)
    if table_errors:
        for e in table_errors:
            print(e)
        return 2
    errors = []
    files = includes = 0
    for rel in source_files(root):
        comp = component_of(rel)
        if comp is None:
            errors.append(f"{rel}: in no component (add its folder to COMPONENTS "
                          f"in scripts/check_layers.py)")
            continue
        files += 1
        includes += check_includes(root, rel, comp, errors)
    links = check_links(root, errors)
    for e in errors:
        print(e)
    if errors:
        print(f"check_layers: {len(errors)} violation(s)", file=sys.stderr)
        return 1
    print(f"check_layers: OK: {files} files in {len(COMPONENTS)} components, "
          f"{includes} project includes, {links} library links")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
