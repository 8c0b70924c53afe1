"""TorchRL's MAPPO on ``mara/ComputeCluster-v3``: ``examples/torchrl_marl.py --algorithm mappo``.

Kept so that earlier commands still run; every option of ``torchrl_marl.py`` applies
(``--out`` is a folder: ``curve.csv`` and ``result.json``).

How to run
----------
    pip install -e ".[torchrl]"
    python examples/torchrl_mappo.py --minutes 10 --out runs/torchrl_mappo
"""

import sys

from torchrl_marl import main

if __name__ == "__main__":
    main(["--algorithm", "mappo", *sys.argv[1:]])
