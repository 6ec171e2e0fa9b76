"""A stand-in for the methods the benchmark's sweeps call on the harness's
context (bench/offload/sections.py's Ctx) besides its data, for the tests
that fake harness.run (test_bench_offload.py, test_bench_inproc.py): an
argv prefix (PREFIX: nothing, or what `gpu-offload run` would put before
the program), no environment, no variables for the report's command
lines. Each test's class sets the data it needs."""


class HarnessStub:
    PREFIX = ()

    def prefix(self, mode, trace=None):
        return list(self.PREFIX)

    def env(self, mode, extra=None):
        return {}

    def keys(self, mode, extra=None):
        return []
