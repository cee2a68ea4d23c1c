"""Package discovery: the repository's top-level folders install under one namespace.

``idealized_runtime/`` is the package; ``cost_model/``, ``local_runner/``, ``api/`` and ``data/``
install as its subpackages (``idealized_runtime.cost_model`` ...), so a wheel puts one name in
site-packages. Every folder below them is found here, none listed by hand; pyproject.toml ships
every file in them.
"""

from pathlib import Path

from setuptools import find_namespace_packages, setup

ROOT = Path(__file__).parent
NAMESPACE = "idealized_runtime"
MAPPED = {
    NAMESPACE: "idealized_runtime",
    f"{NAMESPACE}.cost_model": "cost_model",
    f"{NAMESPACE}.local_runner": "local_runner",
    f"{NAMESPACE}.api": "api",
    f"{NAMESPACE}.data": "data",
}
SKIP = ["__pycache__", "*.__pycache__", "*.egg-info", "*.egg-info.*"]


def discover() -> tuple[list[str], dict[str, str]]:
    packages, package_dir = [], {}
    for name, folder in MAPPED.items():
        packages.append(name)
        package_dir[name] = folder
        for sub in find_namespace_packages(where=str(ROOT / folder), exclude=SKIP):
            packages.append(f"{name}.{sub}")
            package_dir[f"{name}.{sub}"] = f"{folder}/{sub.replace('.', '/')}"
    return packages, package_dir


PACKAGES, PACKAGE_DIR = discover()
setup(packages=PACKAGES, package_dir=PACKAGE_DIR)
