"""Make JupyterLab open the chapters (MyST Markdown) as notebooks: write the setting that makes
jupytext's notebook view the default for Markdown files, into this environment's JupyterLab
settings (``<prefix>/share/jupyter/lab/settings/overrides.json``, kept merged with what is there).

    python tools/lab.py            # make lab runs it once, after installing JupyterLab
"""

import json
import sys
from pathlib import Path

# jupytext's JupyterLab extension registers the "Jupytext Notebook" view; JupyterLab's document
# manager takes the default view of each file type from this setting.
DOCMANAGER = "@jupyterlab/docmanager-extension:plugin"
VIEWERS = {"markdown": "Jupytext Notebook", "myst": "Jupytext Notebook"}


def write_overrides(prefix: Path) -> Path:
    """Merge the default viewers into ``prefix``'s JupyterLab overrides; return the file."""
    path = prefix / "share" / "jupyter" / "lab" / "settings" / "overrides.json"
    settings = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    settings.setdefault(DOCMANAGER, {}).setdefault("defaultViewers", {}).update(VIEWERS)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")
    return path


if __name__ == "__main__":
    print(f"lab: chapters open as notebooks ({write_overrides(Path(sys.prefix))})")
