"""The plugin's entry point (PulumiPlugin.yaml's ``main``): the component provider host, serving
GpuCluster from the checkout this folder is in (its parent holds the packages)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpu_cluster.components.provider import main  # noqa: E402

if __name__ == "__main__":
    main()
