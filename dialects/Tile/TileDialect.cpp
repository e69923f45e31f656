//===- TileDialect.cpp - the tile dialect ------------------------------------===//
#include "dialects/Tile/TileDialect.h"

#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace tilejit::tile;

#include "dialects/Tile/TileAttrInterfaces.cpp.inc"
#include "dialects/Tile/TileDialect.cpp.inc"
#include "dialects/Tile/TileEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/Tile/TileAttrs.cpp.inc"
#define GET_TYPEDEF_CLASSES
#include "dialects/Tile/TileTypes.cpp.inc"

void TileDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/Tile/TileAttrs.cpp.inc"
      >();
  addTypes<
#define GET_TYPEDEF_LIST
#include "dialects/Tile/TileTypes.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "dialects/Tile/TileOps.cpp.inc"
      >();
}
