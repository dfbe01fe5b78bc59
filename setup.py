"""Compiles the modules a compaction spends its time in, as optional Cython extensions.

Each listed module stays plain Python and is the only source: Cython compiles the same
file, with annotations ignored, so the compiled module behaves as the source does. A `.pxd`
beside a module may add C types to its hot loop. Without a C compiler the build skips them
with a warning and Python imports the sources. docs/architecture.md, "Compiled modules".
"""

from Cython.Build import cythonize
from setuptools import setup

COMPILED = [
    "agent/compression/render.py",  # the render loop of a cold compaction
]

extensions = cythonize(
    COMPILED,
    build_dir="build/cython",  # the generated C stays out of the source tree
    compiler_directives={"language_level": 3, "annotation_typing": False},
    quiet=True,
)
for extension in extensions:
    extension.optional = True  # no compiler: a warning, and the sources run as they are

setup(ext_modules=extensions)
