# -*- Python -*-
# lit configuration for tilejit's MLIR tests (tile dialect and passes).
#
# Run through the configured lit.site.cfg.py in the build tree, which sets
# tilejit_tools_dir (holds tilejit-opt), llvm_tools_dir (FileCheck, not,
# mlir-translate), tilejit_lit_source_dir and tilejit_lit_binary_dir.
# Only lit itself is needed: no import from the LLVM source tree.

import os

import lit.formats

config.name = "tilejit"
config.test_format = lit.formats.ShTest(True)
config.suffixes = [".mlir"]
config.excludes = ["lit.cfg.py", "lit.site.cfg.py", "lit.site.cfg.py.in",
                   "CMakeLists.txt"]

# Sources live here; Output/ directories go to the build tree.
config.test_source_root = getattr(config, "tilejit_lit_source_dir", None) or \
    os.path.dirname(os.path.abspath(__file__))
config.test_exec_root = getattr(config, "tilejit_lit_binary_dir", None) or \
    config.test_source_root

tilejit_tools_dir = getattr(config, "tilejit_tools_dir", "")
llvm_tools_dir = getattr(config, "llvm_tools_dir", "")

# Tools are found by name on PATH: tilejit-opt first, then FileCheck, not and
# mlir-translate from the LLVM install.
path = [d for d in (tilejit_tools_dir, llvm_tools_dir) if d]
path.append(config.environment.get("PATH", os.environ.get("PATH", "")))
config.environment["PATH"] = os.pathsep.join(path)

# Every FileCheck variable defined under a CHECK-LABEL is local to that label.
config.environment["FILECHECK_OPTS"] = "--enable-var-scope"

# Explicit substitutions so a RUN line never picks up a stray tool from the
# user's PATH. Substitute whole words only (not inside "--verify-diagnostics"
# or a file name such as "tile-lower-to-emitc.mlir").
def add_tool(name, directory):
    full = os.path.join(directory, name) if directory else name
    if directory and not os.path.exists(full):
        lit_config.warning("%s not found in %s" % (name, directory))
    config.substitutions.append(
        (r"(?<![\w/.-])%s(?![\w.-])" % name.replace("-", r"\-"), full))

add_tool("tilejit-opt", tilejit_tools_dir)
add_tool("mlir-translate", llvm_tools_dir)
add_tool("FileCheck", llvm_tools_dir)
add_tool("not", llvm_tools_dir)

# %python: the interpreter running lit, for RUN lines that generate input.
import sys
config.substitutions.append(("%python", sys.executable))
