"""The external repositories fx for LibTorch builds with.

Nothing is downloaded: LibTorch is the one tools/setup.sh installs (2.13,
from the CPU wheel torch==2.13.0), Debian's 1.13 (--config=libtorch113) or
a user's own (--repo_env=FX_LIBTORCH=/path: third_party/libtorch.bzl);
abseil-cpp, Catch2, oneDNN, Gloo and ONNX come from Debian's packages under
/usr, and the Bazel rule sets from Debian's bazel-bootstrap package or from
copies in this directory. A workspace that depends on fx for
LibTorch declares it and then calls this macro:

    local_repository(
        name = "fx_libtorch",
        path = "/path/to/fx-libtorch",
    )

    load("@fx_libtorch//third_party:repositories.bzl", "fx_libtorch_dependencies")

    fx_libtorch_dependencies(fx_libtorch_path = "/path/to/fx-libtorch")

Repositories the workspace already declares (by name) are left as they are.
"""

load("//third_party:libtorch.bzl", "libtorch_repository")

def _maybe(rule, name, **kwargs):
    if name not in native.existing_rules():
        rule(name = name, **kwargs)

def fx_libtorch_dependencies(fx_libtorch_path = "."):
    """Declares @libtorch (with Gloo), @abseil, @catch2, @onednn, @onnx and the Bazel rule sets.

    Args:
      fx_libtorch_path: where fx for LibTorch is checked out, as given to
        its local_repository ("." in its own WORKSPACE).
    """
    _maybe(
        native.local_repository,
        name = "rules_cc",
        path = fx_libtorch_path + "/third_party/rules_cc",
    )
    _maybe(
        native.local_repository,
        name = "platforms",
        path = "/usr/share/bazel/tools/platforms",
    )
    _maybe(
        native.local_repository,
        name = "rules_java",
        path = "/usr/share/bazel/rules/java",
    )
    _maybe(
        native.local_repository,
        name = "remote_coverage_tools",
        path = fx_libtorch_path + "/third_party/remote_coverage_tools",
    )
    if "libtorch" not in native.existing_rules():
        libtorch_repository(name = "libtorch")
    for name in ["abseil", "catch2", "onednn", "onnx"]:
        _maybe(
            native.new_local_repository,
            name = name,
            build_file = str(Label("//third_party:%s.BUILD" % name)),
            path = "/usr",
        )
