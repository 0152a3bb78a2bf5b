"""Print the top-level keys of Axolotl's config schema, one per line (run with Axolotl's Python).

cw ships the result as cw_cli/frameworks/axolotl/axolotl_keys.txt, so its "did you mean" check never
fires on a key that is valid for Axolotl (e.g. `max_memory`) without importing Axolotl:
    $CW_AXOLOTL_PYTHON tools/axolotl_keys.py > cw_cli/frameworks/axolotl/axolotl_keys.txt
"""

from __future__ import annotations

import importlib.metadata


def schema_keys() -> list[str]:
    """Field names and aliases of Axolotl's input config model."""
    from axolotl.utils.schemas.config import AxolotlInputConfig

    keys = set()
    for name, info in AxolotlInputConfig.model_fields.items():
        keys.add(name)
        if info.alias:
            keys.add(info.alias)
    return sorted(keys)


if __name__ == "__main__":
    print(f"# Axolotl {importlib.metadata.version('axolotl')}: AxolotlInputConfig fields (tools/axolotl_keys.py)")
    print("\n".join(schema_keys()))
