#!/bin/sh
# Print the path of a Python VERSION interpreter (e.g. 3.10) that runs: python3.10 on PATH, else pyenv's
# versions (PYENV_ROOT, else ~/.pyenv). A pyenv shim for a version that is not selected is on PATH but does not
# run, so each candidate is tried. None found: a line saying what to install, on stderr, and exit status 1.
#
#   scripts/oldest_python.sh 3.10        # -> /root/.pyenv/versions/3.10.13/bin/python
version=$1
[ -n "$version" ] || { echo "usage: $0 VERSION" >&2; exit 2; }
for candidate in "$(command -v "python$version" 2>/dev/null)" \
                 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$version".*/bin/python \
                 /usr/bin/python"$version" /usr/local/bin/python"$version"; do
  [ -n "$candidate" ] && [ -x "$candidate" ] || continue
  if [ "$("$candidate" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" = "$version" ] \
     && "$candidate" -c 'import venv, ensurepip' 2>/dev/null; then
    echo "$candidate"
    exit 0
  fi
done
echo "no Python $version found (the oldest this project supports: pyproject.toml's requires-python floor)." >&2
echo "Install one: 'pyenv install $version' or 'sudo apt-get install python$version python$version-venv'" \
     "(deadsnakes on Ubuntu), then run make again." >&2
exit 1
