#!/bin/sh
# find-package.sh BUILD_DIR SOURCE_DIR: installs BUILD_DIR into a prefix here,
# builds tests/find_package against it with find_package(tilejit), runs it.
set -eu
build=$1 src=$2
cmake --install "$build" --prefix "$PWD/prefix" > install.log
cmake -S "$src/tests/find_package" -B consumer -G Ninja -DCMAKE_PREFIX_PATH="$PWD/prefix" \
  > configure.log
cmake --build consumer > build.log
./consumer/consumer
