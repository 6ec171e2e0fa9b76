"""The frontend's copy flow (src/offload/gpu.c) through opcheck and the
test backend: operands that are inputs and outputs come back staged
(GPO_BE_STAGE) and reach the caller's memory only at commit(), after
every device step succeeded; pure outputs come back straight. A copy-out
failing at any operand (the test backend first writes garbage, as a DMA
cut short) leaves the in-out operands as they were, so that the CPU rerun
gives exactly the CPU library's results."""
import subprocess

import pytest

import ofront as F

pytestmark = F.needs_lapack

OPCHECK = str(F.T / "opcheck")


@pytest.fixture(scope="module", autouse=True)
def _build():
    F.build()


def opcheck(tmp_path, tag, env, prefix):
    out = tmp_path / tag
    out.mkdir()
    p = subprocess.run([OPCHECK, str(out), prefix], env=env,
                       capture_output=True, text=True, timeout=300)
    return p, out


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
    return F.opcheck_ref(tmp_path_factory.mktemp("ref"))


def to_host(tmp):
    """(op, operand, flags) of every to_host, from the journal."""
    got, op = [], None
    for r in F.journal(tmp):
        if r[0] == "run":
            op = int(r[1])
        elif r[0] == "to_host":
            got.append((op, int(r[1]), int(r[2])))
    return got


def test_in_out_operands_are_staged_and_pure_outputs_are_not(tmp_path):
    """gesv: a and b in-out (staged), ipiv pure; gemm: c staged when beta
    != 0 and pure (not even copied in) when beta = 0; syev: a staged, w
    pure; getrf: a staged, ipiv pure."""
    e = F.env(tmp_path, "gpu", GPU_OFFLOAD_MIN_FLOPS=0)
    for prefix in ("dgesv", "dgemm_NN", "dgemm_NT_beta0", "dsyev_VU", "dgetrf"):
        p, _ = opcheck(tmp_path, prefix, e, prefix)
        assert p.returncode == 0 and p.stderr == "", p.stdout + p.stderr
    got = set(to_host(tmp_path))
    gesv, gemm, syev, getrf = F.OP["gesv"], F.OP["gemm"], F.OP["syev"], F.OP["getrf"]
    for want in [(gesv, 0, 1), (gesv, 2, 1), (gesv, 1, 0), (gemm, 2, 1),
                 (gemm, 2, 0), (syev, 0, 1), (syev, 1, 0), (getrf, 0, 1),
                 (getrf, 1, 0)]:
        assert want in got, (want, sorted(got))
    # Every operand read back is staged or not, never both, per call shape.
    assert (gesv, 1, 1) not in got and (gesv, 0, 0) not in got


@pytest.mark.parametrize("prefix,fail", [
    ("dgesv", "to_host@0"),        # the first staged operand
    ("dgesv", "to_host@2"),        # the second, after a was staged
    ("dgesv", "to_host@1"),        # the pure output, after both were staged
    ("dgemm_NN", "to_host@2"),     # c in-out (beta != 0)
    ("dgemm_NT_beta0", "to_host@2"),   # c pure: the rerun rewrites it whole
    ("dsyev_VU", "to_host@1"),     # w pure, after a was staged
    ("zgetrf", "to_host@1"),
    ("dgesv", "to_host@2:1"),      # once: the second call then offloads
])
def test_copy_out_failure_leaves_in_out_operands_unchanged(tmp_path, ref, prefix, fail):
    e = F.env(tmp_path, "gpu", GPU_OFFLOAD_MIN_FLOPS=0, GPU_OFFLOAD_TEST_FAIL=fail)
    p, out = opcheck(tmp_path, "fail", e, prefix)
    assert p.returncode == 0, p.stdout + p.stderr    # no gap CLOBBERED
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and "copying from the device" in lines[0], p.stderr
    assert [r for r in F.journal(tmp_path) if r[0] == "fail"], "not injected"
    # opcheck runs every case whose name starts with the prefix: "dgesv"
    # includes dgesvd, whose operand numbers differ (not failed: GPU
    # results, compared with tolerance).
    names = [f.name for f in out.iterdir() if not f.name.startswith("dgesvd")]
    assert names
    assert F.compare(ref, out) == []
    if ":" not in fail:
        # Every call of the prefix failed its copy-out and reran on the
        # CPU from untouched inputs: the CPU library's results, bit for
        # bit.
        bad = [n for n in names if (out / n).read_bytes() != (ref / n).read_bytes()]
        assert bad == []


def calls(tmp):
    """Per kernel, from the journal: [op, prefaults before it, {operand:
    flags} of its to_host copies]."""
    got, pre = [], 0
    for r in F.journal(tmp):
        if r[0] == "prefault":
            pre += 1
        elif r[0] == "run":
            got.append([int(r[1]), pre, {}])
            pre = 0
        elif r[0] == "to_host" and got:
            got[-1][2][int(r[1])] = int(r[2])
    return got


PREFAULT_CASES = ("dgesv", "dgemm_NN", "dgemm_NT_beta0", "dsyev_VU", "dgetrf")


def test_pure_outputs_are_handed_to_prefault_before_the_kernel(tmp_path, ref):
    """The backend's optional prefault() gets each pure output (copied
    back with flags 0) of a call before its kernel runs, and nothing
    else: gemm's c only with beta = 0, gesv's ipiv, syev's w; the in-out
    operands (staged) never. The results are the same."""
    e = F.env(tmp_path, "gpu", GPU_OFFLOAD_MIN_FLOPS=0)
    for prefix in PREFAULT_CASES:
        p, out = opcheck(tmp_path, prefix, e, prefix)
        assert p.returncode == 0 and p.stderr == "", p.stdout + p.stderr
        assert F.compare(ref, out) == []
    got = calls(tmp_path)
    copied = [c for c in got if c[2]]
    assert copied
    for op, pre, th in copied:
        assert pre == sum(1 for f in th.values() if f == 0), (op, pre, th)
    assert [c for c in copied if c[1]], "no prefault at all"
    gemm = [c for c in copied if c[0] == F.OP["gemm"]]
    assert {c[1] for c in gemm} == {0, 1}      # beta != 0: none; beta = 0: c
    # Lines of a prefault: width, rows, pitch of a real operand.
    pf = [r for r in F.journal(tmp_path) if r[0] == "prefault"]
    assert all(int(w) > 0 and int(n) > 0 and int(ld) >= int(w) for _, w, n, ld in pf)


@pytest.mark.parametrize("how", ["base-size", "verify"])
def test_no_prefault_from_an_older_table_or_in_verify_mode(tmp_path, ref, how):
    """A backend whose table has the ABI 2 base size (no optional entries)
    is still taken and never asked to prefault; verify mode copies the
    results into its own buffers and asks for none either."""
    extra = {"GPU_OFFLOAD_TEST_BASE": "1"} if how == "base-size" else \
        {"GPU_OFFLOAD_VERIFY": "1"}
    e = F.env(tmp_path, "gpu" if how == "base-size" else "",
              GPU_OFFLOAD_MIN_FLOPS=0, **extra)
    p, out = opcheck(tmp_path, "o", e, "dgemm_NT_beta0")
    assert p.returncode == 0 and p.stderr == "", p.stdout + p.stderr
    assert F.compare(ref, out) == []
    got = calls(tmp_path)
    assert got and all(c[1] == 0 for c in got), got
