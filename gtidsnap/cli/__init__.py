"""The ``gtidsnap`` command line: typer and rich over the library, which never prints."""

import os

# Arrow's buffers from the system allocator unless the user chose a pool: pyarrow's default (mimalloc)
# keeps freed pages, which left a 1M-row snapshot into Delta ~50-130 MB larger in the engine and
# ~12 MB in each chunk reader (measured, same speed). Set before pyarrow loads (it reads it once);
# the reader processes inherit it.
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
