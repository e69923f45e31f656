//===- RuntimeTest.cpp - the runtime alone, without the compiler -----------===//
//
// This program links the runtime library and nothing of the compiler or of
// MLIR: that it builds is part of the test. Bad launch records and tensor
// map descriptions are refused with what was wrong, before the driver is
// asked for anything.
//
//===----------------------------------------------------------------------===//
#include <gtest/gtest.h>

#include "runtime/LoadedKernel.h"
#include "runtime/TensorMap.h"

using namespace tilejit;

namespace {

template <class T> std::string errorOf(llvm::Expected<T> e) {
  return e ? std::string() : llvm::toString(e.takeError());
}

TensorMapDesc goodDesc() {
  TensorMapDesc d;
  d.dtype = DType::BF16;
  d.rank = 2;
  d.address = 0x10000;
  d.dims[0] = 4096;
  d.dims[1] = 512;
  d.strideBytes[0] = 4096 * 2;
  d.box[0] = 64;
  d.box[1] = 128;
  d.swizzle = TensorMapDesc::B128;
  return d;
}

TEST(TensorMap, DescriptionsAreCheckedFieldByField) {
  auto check = [](void (*change)(TensorMapDesc &)) {
    TensorMapDesc d = goodDesc();
    change(d);
    return errorOf(encodeTensorMap(d));
  };
  EXPECT_NE(check([](TensorMapDesc &d) { d.rank = 6; }).find("rank must be 1 to 5"),
            std::string::npos);
  EXPECT_NE(check([](TensorMapDesc &d) { d.address = 0x10008; }).find("16-byte aligned"),
            std::string::npos);
  EXPECT_NE(check([](TensorMapDesc &d) { d.dims[1] = 0; }).find("dims[1] = 0"), std::string::npos);
  EXPECT_NE(check([](TensorMapDesc &d) { d.box[0] = 512; }).find("box[0] = 512"),
            std::string::npos);
  EXPECT_NE(check([](TensorMapDesc &d) {
              d.strideBytes[0] = 8200;
            }).find("strideBytes[0] = 8200 is not a positive multiple of 16"),
            std::string::npos);
  EXPECT_NE(check([](TensorMapDesc &d) { d.box[0] = 4; }).find("not a multiple of 16"),
            std::string::npos);
  EXPECT_NE(check([](TensorMapDesc &d) {
              d.box[0] = 128;
            }).find("256 bytes, more than the 128-byte swizzle span"),
            std::string::npos);
}

KernelBinary binaryWith(EntryInfo e) {
  KernelBinary b;
  b.key = std::string(64, 'a');
  b.cubin = {'\x7f', 'E', 'L', 'F'};
  b.entries = {std::move(e)};
  return b;
}

TEST(LoadedKernel, BadLaunchRecordsAreRefusedBeforeTheDriver) {
  EntryInfo e;
  e.name = "k";
  e.blockThreads = 2048;
  EXPECT_NE(errorOf(LoadedKernel::load(binaryWith(e))).find("entry k: has 2048 threads"),
            std::string::npos);
  e.blockThreads = 128;
  e.cluster = {4, 4, 2};
  EXPECT_NE(errorOf(LoadedKernel::load(binaryWith(e))).find("clusters of 32 blocks"),
            std::string::npos);
  e.cluster = {1, 1, 1};
  e.dynamicSmemBytes = 1 << 20;
  EXPECT_NE(errorOf(LoadedKernel::load(binaryWith(e))).find("dynamic shared memory"),
            std::string::npos);
  e.dynamicSmemBytes = 0;
  e.grid[0] = GridRule{{{{GridRule::Sym, 0}}}, {{0, -1}}};
  EXPECT_NE(errorOf(LoadedKernel::load(binaryWith(e))).find("grid symbol naming no parameter"),
            std::string::npos);
  KernelBinary empty = binaryWith(e);
  empty.cubin.clear();
  EXPECT_NE(errorOf(LoadedKernel::load(empty)).find("no cubin"), std::string::npos);
}

} // namespace
