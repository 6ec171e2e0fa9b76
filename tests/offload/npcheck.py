"""npcheck.py OUT.npz - NumPy and SciPy linear algebra on fixed data, the
results saved to OUT.npz (run by test_offload_numpy.py with and without
libgpuoffload.so). Sizes are large enough for the default threshold."""
import sys

import numpy as np
import scipy.linalg as sl

rng = np.random.default_rng(7)
n = 160
a = rng.standard_normal((n, n))
b = rng.standard_normal((n, 40))
z = rng.standard_normal((n, n)) + 1j * rng.standard_normal((n, n))
spd = a @ a.T + n * np.eye(n)
her = z + z.conj().T
tall = rng.standard_normal((n + 40, n))
f32 = a.astype(np.float32)

r = {}
r["dot"] = np.dot(a, a.T)
r["dot32"] = np.dot(f32, f32)
r["zdot"] = z @ z
r["solve"] = np.linalg.solve(a, b)
r["inv"] = np.linalg.inv(a)
w, v = np.linalg.eigh(spd)
r["eigh_w"], r["eigh_v"] = w, v
w, v = np.linalg.eigh(her)
r["zeigh_w"], r["zeigh_v"] = w, v
u, s, vt = np.linalg.svd(a)
r["svd_u"], r["svd_s"], r["svd_vt"] = u, s, vt
r["lstsq"] = np.linalg.lstsq(tall, tall @ b[:, :3] + 0.01, rcond=None)[0]
r["cholesky"] = np.linalg.cholesky(spd)
lu, piv = sl.lu_factor(a)
r["lu"], r["piv"] = lu, piv
r["lu_solve"] = sl.lu_solve((lu, piv), b)
r["qr_r"] = np.linalg.qr(tall, mode="r")
r["zsolve"] = np.linalg.solve(z, b.astype(complex))
np.savez(sys.argv[1], **r)
print("npcheck ok")
