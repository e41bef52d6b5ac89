"""@libtorch: the LibTorch fx for LibTorch builds against, chosen at fetch time.

Where it comes from, first match wins:
  --repo_env=FX_LIBTORCH=/path/to/libtorch   a LibTorch of the user's own: the
                                             pytorch.org zip unpacked, or a
                                             torch wheel's torch/ directory
                                             (include/, lib/ below it)
  --config=libtorch113                       Debian 12's libtorch 1.13
                                             (FX_LIBTORCH=/usr, .bazelrc)
  the default                                LibTorch 2.13 from the CPU wheel
                                             torch==2.13.0 that tools/setup.sh
                                             installs in its virtual
                                             environment

A LibTorch rooted at /usr is Debian's layout: its headers are on the
toolchain's default search path and only the C++ frontend's include root is
declared. Any other root is a LibTorch package: its include/ directory is
linked in, leaving out the oneDNN and protobuf headers the packages ship
(libtorch_cpu.so keeps its oneDNN 3.x hidden and exports none of it: the
lowering compiles and links Debian's oneDNN 2.6, //third_party:onednn; the
ONNX export, Debian's protobuf), and
its lib/ directory is linked with an rpath, so that binaries load that
LibTorch's libraries (libgomp.so.1 among them) wherever it lies.

The repository also writes defs.bzl: LIBTORCH_VERSION ("2.13.0"),
LIBTORCH_INCLUDES (absolute include directories, for clang's precompiled
header, read by //third_party/pch) and LIBTORCH_PYTHON (below, for shell
tests); and python.h (target :python), which
names the Python whose torch matches (FX_LIBTORCH_PYTHON): the tests write
TorchScript files and run references with it.
"""

DEFAULT_LIBTORCH = "/usr/local/lib/fx-libtorch/venv/lib/python3.11/site-packages/torch"

# The package's include/ entries left out: headers of libraries LibTorch
# keeps inside libtorch_cpu.so that would shadow Debian's, which we link
# (oneDNN 3.x over libdnnl-dev's 2.6, protobuf over the one libonnx-dev
# builds on), and pybind11.
_LEFT_OUT = ["google", "oneapi", "pybind11"]

def _version(ctx, include):
    for header in [
        "torch/headeronly/version.h",
        "torch/csrc/api/include/torch/version.h",
    ]:
        path = ctx.path("%s/%s" % (include, header))
        if not path.exists:
            continue
        parts = {}
        for line in ctx.read(path).splitlines():
            words = [w for w in line.replace("\t", " ").split(" ") if w]
            if len(words) == 3 and words[0] == "#define" and words[1] in [
                "TORCH_VERSION_MAJOR",
                "TORCH_VERSION_MINOR",
                "TORCH_VERSION_PATCH",
            ]:
                parts[words[1]] = words[2]
        if len(parts) == 3:
            return "%s.%s.%s" % (
                parts["TORCH_VERSION_MAJOR"],
                parts["TORCH_VERSION_MINOR"],
                parts["TORCH_VERSION_PATCH"],
            )
    fail("no LibTorch version header under %s (torch/version.h): " % include +
         "FX_LIBTORCH must name a LibTorch with include/ and lib/ below it")

# The Python of the same torch: a wheel's, when the LibTorch is a wheel's
# torch/ directory inside a virtual environment (lib/python3.X/site-packages/
# torch); FX_LIBTORCH_PYTHON if set; else Debian's /usr/bin/python3 (torch
# 1.13, whose TorchScript files LibTorch 2.x loads).
def _python(ctx, root):
    given = ctx.os.environ.get("FX_LIBTORCH_PYTHON", "")
    if given:
        return given
    if root not in ["/usr", "/"]:
        venv = ctx.path(root).dirname.dirname.dirname.dirname
        python = venv.get_child("bin").get_child("python")
        if python.exists:
            return str(python)
    return "/usr/bin/python3"

def _libtorch_repository_impl(ctx):
    root = ctx.os.environ.get("FX_LIBTORCH", "") or ctx.attr.default
    root = root.rstrip("/") or "/"
    if root in ["/usr", "/"]:
        # Debian: headers in /usr/include, libraries in the linker's path.
        include = "/usr/include"
        ctx.symlink(include + "/torch/csrc/api/include", "include/torch/csrc/api/include")
        version = _version(ctx, include)
        ctx.file("BUILD.bazel", ctx.read(ctx.attr.debian_build_file))
        includes = [include + "/torch/csrc/api/include"]
    else:
        include = root + "/include"
        lib = root + "/lib"
        if not ctx.path(include).exists or not ctx.path(lib).exists:
            fail(("FX_LIBTORCH=%s has no include/ and lib/: name the directory " +
                  "a LibTorch zip unpacks to (libtorch/), or a torch wheel's " +
                  "torch/ directory; run tools/setup.sh for the default " +
                  "LibTorch 2.13") % root)
        version = _version(ctx, include)
        for entry in ctx.path(include).readdir():
            if entry.basename in _LEFT_OUT or entry.basename.startswith("dnnl"):
                continue
            ctx.symlink(entry, "include/" + entry.basename)
        ctx.symlink(lib, "lib")
        ctx.template("BUILD.bazel", ctx.attr.package_build_file, {
            "%{lib}": lib,
        })
        includes = [include, include + "/torch/csrc/api/include"]
    python = _python(ctx, root)
    # torch.export (.pt2 files) is torch 2.x's: the default LibTorch's Python
    # also when building against another (Debian's 1.13 has none).
    export_python = _python(ctx, ctx.attr.default.rstrip("/") or "/")
    ctx.file("python.h", "\n".join([
        "// The Python whose torch matches @libtorch's version (third_party/libtorch.bzl):",
        "// what the tests write TorchScript files and references with.",
        "#pragma once",
        "#define FX_LIBTORCH_PYTHON \"%s\"" % python,
        "// A Python with torch.export, which writes the tests' .pt2 files.",
        "#define FX_EXPORT_PYTHON \"%s\"" % export_python,
        "",
    ]))
    ctx.file("defs.bzl", "\n".join([
        '"""The LibTorch @libtorch was made from (third_party/libtorch.bzl)."""',
        "",
        'LIBTORCH_ROOT = "%s"' % root,
        'LIBTORCH_VERSION = "%s"' % version,
        "LIBTORCH_INCLUDES = %s" % repr(includes),
        'LIBTORCH_PYTHON = "%s"' % python,
        'EXPORT_PYTHON = "%s"' % export_python,
        "",
    ]))

libtorch_repository = repository_rule(
    implementation = _libtorch_repository_impl,
    attrs = {
        "default": attr.string(default = DEFAULT_LIBTORCH),
        "debian_build_file": attr.label(default = Label("//third_party:libtorch_debian.BUILD")),
        "package_build_file": attr.label(default = Label("//third_party:libtorch_package.BUILD")),
    },
    environ = ["FX_LIBTORCH", "FX_LIBTORCH_PYTHON"],
    local = True,
)
