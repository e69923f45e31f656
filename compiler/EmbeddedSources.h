//===- EmbeddedSources.h - sources built into the binary ----------*- C++ -*-===//
//
// The device header library (runtime/device/*.cuh) travels inside the binary,
// so NVRTC needs no files at run time; its hash, each template's source hash
// and the hash of the compiler's own sources enter every kernel key.
// Generated at build time by cmake/Embed.cmake.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstddef>
#include <string_view>

namespace tilejit::embedded {

struct File {
  const char *name;
  const char *text;
  size_t size;
};

/// The device headers, by include name ("memory.cuh").
const File *deviceFiles(size_t &count);
/// SHA-256 (hex) over every device header's name and text.
std::string_view deviceLibraryHash();
/// SHA-256 (hex) of a template's source file, by file name; "" if unknown.
std::string_view templateSourceHash(std::string_view fileName);
/// SHA-256 (hex) over the sources that lower every template's IR to a binary:
/// the tile dialect, the passes, the pipeline and the NVRTC driver.
std::string_view compilerSourceHash();

} // namespace tilejit::embedded
