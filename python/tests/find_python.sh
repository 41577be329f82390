#!/bin/sh
# Prints the path of a Python interpreter of version $1 (for example 3.12), or fails saying where
# it looked. `make test-megatron` builds megatron-core 0.19.2's virtual environment with it
# (that release needs Python >= 3.12; the machines' pyenv has one). PYTHON312 set by the caller
# wins in the Makefile; here: python$1 on PATH, pyenv's versions (newest first), /usr/local/bin,
# /usr/bin. A pyenv shim that has no such version selected fails the check and is skipped.
set -u
want=$1
pyenv_versions=${PYENV_ROOT:-$HOME/.pyenv}/versions
for candidate in "python$want" $(ls -d "$pyenv_versions/$want".*/bin/"python$want" 2>/dev/null | sort -t. -k3 -n -r) \
                 "/usr/local/bin/python$want" "/usr/bin/python$want"; do
    path=$(command -v "$candidate" 2>/dev/null) || continue
    if "$path" -c "import sys; sys.exit(sys.version_info[:2] != tuple(map(int, '$want'.split('.'))))" \
            2>/dev/null; then
        echo "$path"
        exit 0
    fi
done
echo "find_python.sh: no Python $want found (looked for python$want on PATH, in $pyenv_versions," \
     "/usr/local/bin and /usr/bin); megatron-core 0.19.2 needs Python >= 3.12: install one" \
     "(pyenv install $want) or pass PYTHON312=/path/to/python$want to make" >&2
exit 1
