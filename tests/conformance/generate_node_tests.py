# Generates ONNX's backend node tests (model.onnx + test_data_set_*/input_*.pb
# and output_*.pb) with Debian's python3-onnx into the folder given as argv[1].
# numpy 1.24 removed the aliases the generator of onnx 1.12 still uses; they
# are restored first.
import os, sys
import numpy as np

for alias, value in (("float", float), ("int", int), ("bool", bool), ("object", object)):
    if not hasattr(np, alias):
        setattr(np, alias, value)

from onnx.backend.test.cmd_tools import main  # noqa: E402

out = sys.argv[1]
sys.argv = ["onnx-backend-test", "generate-data", "-o", out]
main()
