"""libFuzzer binaries: built only by tools/fuzz (clang, --define=fuzzing=1), skipped by //..."""

def fuzz_binary(name, fuzz_lib, **kwargs):
    """A libFuzzer binary around `fuzz_lib`, which defines LLVMFuzzerTestOneInput (alwayslink)."""
    native.cc_binary(
        name = name,
        deps = [fuzz_lib],
        linkopts = select({
            "//tools:fuzzing": ["-fsanitize=fuzzer,address,undefined"],
            "//conditions:default": [],
        }),
        testonly = True,
        tags = ["manual"],
        **kwargs
    )
