"""Package mapping for odradek's source layout.

The source tree is laid out by role (``framework/`` for the kernel, ``plugins/<name>/`` for each
built-in plugin) but installs as one namespaced package, ``odradek``: ``framework/`` becomes
``odradek`` and ``plugins/<name>/`` becomes ``odradek.plugins.<name>``. Packages are discovered by
walking the folders, so adding a sub-package needs no edit here. Editable installs map the same way.
"""

from pathlib import Path

from setuptools import setup

ROOT = Path(__file__).parent


def _walk(src: Path, name: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for init in sorted(src.rglob("__init__.py")):
        rel = init.parent.relative_to(src)
        if any(part.startswith((".", "_")) or part == "build" for part in rel.parts):
            continue
        pkg = ".".join((name, *rel.parts)) if rel.parts else name
        found[pkg] = str(init.parent.relative_to(ROOT))
    return found


package_dir = _walk(ROOT / "framework", "odradek")
for plugin in sorted((ROOT / "plugins").iterdir()):
    if (plugin / "__init__.py").exists():
        package_dir.update(_walk(plugin, f"odradek.plugins.{plugin.name}"))

setup(
    packages=sorted(package_dir),
    package_dir=package_dir,
    package_data={"odradek": ["py.typed"]},
)
