# Debian links MLIR's imported targets against the 130 MB libLLVM.so through the
# imported target `LLVM`. tilejit needs only LLVMSupport (and the remarks
# libraries that MlirOptMain pulls in), so `LLVM` is pointed at the static
# archives: no tilejit binary needs libLLVM.so, and each runs on a machine that
# lacks it.
find_package(ZLIB REQUIRED)
find_library(TILEJIT_ZSTD_LIB zstd REQUIRED)
set(_llvm_lib "${LLVM_LIBRARY_DIR}")
set_target_properties(LLVMSupport PROPERTIES
  INTERFACE_LINK_LIBRARIES "rt;dl;m;ZLIB::ZLIB;${TILEJIT_ZSTD_LIB};LLVMDemangle;Threads::Threads")
foreach(_cfg "" _RELWITHDEBINFO _RELEASE _DEBUG _MINSIZEREL)
  set_property(TARGET LLVM PROPERTY IMPORTED_LOCATION${_cfg} "${_llvm_lib}/libLLVMDemangle.a")
endforeach()
set_property(TARGET LLVM PROPERTY IMPORTED_SONAME_RELWITHDEBINFO "")
set_property(TARGET LLVM PROPERTY IMPORTED_NO_SONAME TRUE)
set_property(TARGET LLVM PROPERTY
  INTERFACE_LINK_LIBRARIES "LLVMRemarks;LLVMBitstreamReader;LLVMSupport")
