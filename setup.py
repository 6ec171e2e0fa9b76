"""`pip install --no-build-isolation .` at the repository root: builds the
Python package, which lives in python/ (see python/setup.py, which this only
runs)."""

import os
import runpy

runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                            "python", "setup.py"), run_name="__main__")
