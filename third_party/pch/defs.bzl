"""Precompiled libtorch headers for this repository's C++ targets.

    load("//third_party/pch:defs.bzl", "cc_binary", "cc_library", "cc_test")

These wrap Bazel's rules of the same names: each target also depends on
//third_party/pch and compiles every source with
`-include libtorch_headers.h` (gcc), which gcc reads from the header precompiled
for the configuration (third_party/pch/libtorch_headers.h: ATen and
torch::nn::Module, most of a compile's time). `precompiled_header` builds
it with the compile command Bazel would run for a source of the same
configuration, as configured and, under -c opt, also at -O0 (what
.bazelrc's --per_file_copt gives tests), in a directory gcc searches for a
variant that matches; a source whose flags match neither parses the header as
text, with the same result. Under clang (--config=fuzz, all at -O0) one
.pch, which each source takes with `-include-pch PATH`.

Verify that a source uses it: --per_file_copt=SOURCE@-H prints "!" before
the variant gcc took ("x" before one it rejected).

Bazel learns that a source used it from the source's dependency file:
under gcc, -fpch-deps lists the header and what it includes (the header is
precompiled with -MD so that it records them), so an edit of
libtorch_headers.h or of libtorch's declared headers recompiles what used
it. Under clang the dependency file lists what the .pch includes, not the
header's own text.
"""

load("@bazel_tools//tools/build_defs/cc:action_names.bzl", "ACTION_NAMES")
load("@bazel_tools//tools/cpp:toolchain_utils.bzl", "find_cpp_toolchain")

# The variants: the configuration's own flags, and tests' -O0.
_VARIANTS = {
    "configured": [],
    "unoptimized": ["-O0"],
}

def _precompiled_header_impl(ctx):
    cc_toolchain = find_cpp_toolchain(ctx)
    features = cc_common.configure_features(
        ctx = ctx,
        cc_toolchain = cc_toolchain,
        requested_features = ctx.features,
        unsupported_features = ctx.disabled_features,
    )
    deps_info = cc_common.merge_cc_infos(
        cc_infos = [d[CcInfo] for d in ctx.attr.deps],
    )
    deps = deps_info.compilation_context
    name = ctx.file.header.basename
    header = ctx.actions.declare_file("%s/%s" % (ctx.label.name, name))
    ctx.actions.symlink(output = header, target_file = ctx.file.header)
    compiler = cc_common.get_tool_for_action(
        feature_configuration = features,
        action_name = ACTION_NAMES.cpp_compile,
    )
    outputs = []
    if ctx.attr.clang:
        outputs.append(_clang_pch(ctx, features, cc_toolchain, compiler, header))
    else:
        for variant, flags in _VARIANTS.items():
            if variant == "unoptimized" and ctx.var["COMPILATION_MODE"] != "opt":
                continue  # unoptimized already as configured
            out = ctx.actions.declare_file("%s/%s.gch/%s" % (ctx.label.name, name, variant))
            deps_file = ctx.actions.declare_file("%s/%s.%s.d" % (ctx.label.name, name, variant))
            _compile(
                ctx,
                features,
                cc_toolchain,
                compiler,
                inputs = depset([header], transitive = [deps.headers]),
                variables = cc_common.create_compile_variables(
                    feature_configuration = features,
                    cc_toolchain = cc_toolchain,
                    user_compile_flags = ctx.fragments.cpp.copts + ctx.fragments.cpp.cxxopts +
                                         flags + ["-MD", "-MF", deps_file.path, "-x", "c++-header"],
                    source_file = header.path,
                    output_file = out.path,
                    include_directories = deps.includes,
                    quote_include_directories = deps.quote_includes,
                    system_include_directories = deps.system_includes,
                    framework_include_directories = deps.framework_includes,
                    preprocessor_defines = deps.defines,
                    use_pic = True,
                ),
                output = out,
                extra_outputs = [deps_file],
                progress_message = "Precompiling %s (%s)" % (name, variant),
            )
            outputs.append(out)
    context = cc_common.create_compilation_context(
        headers = depset([header] + outputs),
        system_includes = depset([header.dirname]),
    )
    return [
        DefaultInfo(files = depset([header] + outputs)),
        cc_common.merge_cc_infos(
            direct_cc_infos = [CcInfo(compilation_context = context)],
            cc_infos = [deps_info],
        ),
    ]

def _compile(ctx, features, cc_toolchain, compiler, inputs, variables, output,
             progress_message, stdin = None, extra_outputs = []):
    arguments = cc_common.get_memory_inefficient_command_line(
        feature_configuration = features,
        action_name = ACTION_NAMES.cpp_compile,
        variables = variables,
    )
    env = cc_common.get_environment_variables(
        feature_configuration = features,
        action_name = ACTION_NAMES.cpp_compile,
        variables = variables,
    )
    common = dict(
        env = env,
        inputs = depset(transitive = [inputs, cc_toolchain.all_files]),
        outputs = [output] + extra_outputs,
        mnemonic = "CppPrecompileHeader",
        progress_message = progress_message,
    )
    if stdin:
        ctx.actions.run_shell(
            command = '"$@" < "%s"' % stdin.path,
            arguments = [compiler] + arguments,
            **common
        )
    else:
        ctx.actions.run(executable = compiler, arguments = arguments, **common)

# clang records where each file of a precompiled header was found and
# checks it is there when the header is used, so the header is compiled
# from stdin and libtorch's headers found by absolute paths (outside the
# sandbox, the same in every clone); -fno-pch-timestamp keeps it valid
# across a reinstall of the same files. One variant: --config=fuzz builds
# everything at -O0.
def _clang_pch(ctx, features, cc_toolchain, compiler, header):
    out = ctx.actions.declare_file("%s/%s.pch" % (ctx.label.name, header.basename))
    _compile(
        ctx,
        features,
        cc_toolchain,
        compiler,
        inputs = depset([header]),
        variables = cc_common.create_compile_variables(
            feature_configuration = features,
            cc_toolchain = cc_toolchain,
            user_compile_flags = ctx.fragments.cpp.copts + ctx.fragments.cpp.cxxopts +
                                 ["-x", "c++-header", "-Xclang", "-fno-pch-timestamp"],
            source_file = "-",
            output_file = out.path,
            system_include_directories = depset(ctx.attr.clang_system_includes),
            use_pic = True,
        ),
        output = out,
        progress_message = "Precompiling %s (clang)" % header.basename,
        stdin = header,
    )
    return out

precompiled_header = rule(
    implementation = _precompiled_header_impl,
    attrs = {
        "header": attr.label(allow_single_file = [".h"], mandatory = True),
        "deps": attr.label_list(providers = [CcInfo]),
        # Under clang: one .pch, libtorch's headers found at these paths.
        "clang": attr.bool(),
        "clang_system_includes": attr.string_list(),
        "_cc_toolchain": attr.label(default = Label("@bazel_tools//tools/cpp:current_cc_toolchain")),
    },
    fragments = ["cpp"],
    toolchains = ["@bazel_tools//tools/cpp:toolchain_type"],
    incompatible_use_toolchain_transition = True,
)

_PCH = Label("//third_party/pch")

# Where the clang .pch is (clang takes it by path, not by search).
_CLANG_PCH = "$(BINDIR)/" + "/".join(
    [p for p in [_PCH.workspace_root, _PCH.package, _PCH.name, "libtorch_headers.h.pch"] if p],
)

def _with_pch(kwargs):
    clang = str(Label("//third_party/pch:clang_fuzz"))
    kwargs["deps"] = kwargs.get("deps", []) + [_PCH]
    kwargs["copts"] = kwargs.get("copts", []) + select({
        clang: ["-include-pch", _CLANG_PCH],
        "//conditions:default": ["-include", "libtorch_headers.h", "-fpch-deps"],
    })
    return kwargs

def cc_library(**kwargs):
    native.cc_library(**_with_pch(kwargs))

def cc_binary(**kwargs):
    native.cc_binary(**_with_pch(kwargs))

def cc_test(**kwargs):
    native.cc_test(**_with_pch(kwargs))
