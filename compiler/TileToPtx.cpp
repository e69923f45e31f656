//===- TileToPtx.cpp - tile kernels straight to PTX -----------------------===//
//
// Each value of a kernel becomes PTX operands: a scalar one register or
// immediate; a tile the calling thread's elements, in order (an f32 tile one
// .f32 register per element, a bf16 or f16 tile one .b32 word per two
// elements, the lower-indexed element in the low half, as memory holds them).
// Splats and broadcasts repeat operands rather than copy them; ptxas
// allocates the registers. The layout rules are those of the device library
// (runtime/device/*.cuh), which the C++ back end calls:
//  - #tile.blocked<vec, rowThreads TR, colThreads TC>: thread `tid` holds row
//    tid / TC of the tile; chunk k of its row is the run of `vec` elements at
//    column k * TC * vec + (tid % TC) * vec;
//  - a dim = 0 slice: the same columns, in every row of threads;
//  - a dim = 1 slice: one value, its row's.
// Runs that lie wholly inside the operand move in accesses of up to 16 bytes;
// a run at a ragged edge moves element by element, masked.
//
//===----------------------------------------------------------------------===//
#include "compiler/TileToPtx.h"

#include "llvm/ADT/bit.h"
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "dialects/Tile/TileDialect.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace tilejit::tile;

namespace tilejit {

char PtxUnsupported::ID = 0;

namespace {

llvm::Error unsupported(Operation *op, const llvm::Twine &why) {
  std::string where;
  llvm::raw_string_ostream os(where);
  op->getLoc().print(os);
  return llvm::make_error<PtxUnsupported>("the PTX back end does not lower '" +
                                          op->getName().getStringRef().str() + "' (" + why.str() +
                                          ") at " + where);
}

std::string f32Imm(float v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0f%08X", llvm::bit_cast<uint32_t>(v));
  return buf;
}

bool isImm(const std::string &op) { return !op.empty() && op[0] != '%'; }
int64_t immValue(const std::string &op) { return std::stoll(op); }

/// A value of the kernel as PTX operands.
struct Frag {
  enum Kind { Index, F32, Words } kind = Index;
  Type elem;         // index, f32, or (Words) bf16 / f16
  int64_t count = 1; // elements
  SmallVector<std::string> ops;
};

/// The memory's bits of `pad` as element type `elem` holds it (rounded to
/// nearest even, as the device library's constants are).
uint32_t padBits(Type elem, float pad) {
  if (elem.isF32())
    return llvm::bit_cast<uint32_t>(pad);
  if (elem.isF16())
    return llvm::bit_cast<uint16_t>(static_cast<_Float16>(pad));
  uint32_t u = llvm::bit_cast<uint32_t>(pad);
  return pad != pad ? 0x7fc0u : ((u + 0x7fffu + ((u >> 16) & 1u)) >> 16) & 0xffffu;
}

int elemBytes(Type t) { return t.isF32() ? 4 : 2; }

/// One access's way through the caches (see memory.cuh).
enum class CacheOp { Cached, Stream, Coherent };

/// A kernel argument.
struct Arg {
  Type type;
  std::string scalar;             // f32 or index argument
  std::string ptr;                // memref: global address of element 0
  SmallVector<std::string> sizes; // memref sizes (immediates where static)
};

/// Thread geometry of one column-thread count: this thread's row of threads
/// and lane, as 64-bit registers.
struct Geometry {
  std::string row, lane;
};

/// A predicate: always true, always false, or a register.
struct Pred {
  enum Kind { True, False, Reg } kind = True;
  std::string reg;
  static Pred of(bool b) { return {b ? True : False, ""}; }
};

class KernelWriter {
public:
  explicit KernelWriter(KernelOp kernel) : kernel(kernel) {}

  llvm::Error write(std::string &out);

private:
  KernelOp kernel;
  std::string body;
  llvm::raw_string_ostream os{body};
  int nPred = 0, nB32 = 0, nB64 = 0, nF32 = 0, nLabel = 0;
  DenseMap<Value, Frag> vals;
  DenseMap<Value, Arg> args;
  std::map<int64_t, Geometry> geometry;
  std::string tid32, tid64, scratchAddr, clusterAddr, round;
  int64_t clusterBlocks = 1, clusterRows = 0, scratchBytes = 0;
  int64_t clusterBarsOffset = 0; // bytes of slots before the two barriers
  DenseMap<Operation *, CacheOp> loadCache;

  std::string pred() { return "%p" + std::to_string(nPred++); }
  std::string b32() { return "%r" + std::to_string(nB32++); }
  std::string b64() { return "%rd" + std::to_string(nB64++); }
  std::string f32() { return "%f" + std::to_string(nF32++); }
  std::string label() { return "$L_" + std::to_string(nLabel++); }
  std::string fresh(Frag::Kind k) {
    return k == Frag::F32 ? f32() : k == Frag::Words ? b32() : b64();
  }
  static const char *movType(Frag::Kind k) {
    return k == Frag::F32 ? "f32" : k == Frag::Words ? "b32" : "b64";
  }

  // ---- index arithmetic, folding immediates ------------------------------
  std::string inReg(const std::string &v) {
    if (!isImm(v))
      return v;
    std::string r = b64();
    os << "\tmov.b64 " << r << ", " << v << ";\n";
    return r;
  }
  std::string add(const std::string &a, const std::string &b) {
    if (isImm(a) && isImm(b))
      return std::to_string(immValue(a) + immValue(b));
    if (isImm(a))
      return add(b, a);
    if (isImm(b) && immValue(b) == 0)
      return a;
    std::string r = b64();
    os << "\tadd.s64 " << r << ", " << a << ", " << b << ";\n";
    return r;
  }
  std::string mul(const std::string &a, const std::string &b) {
    if (isImm(a) && isImm(b))
      return std::to_string(immValue(a) * immValue(b));
    if (isImm(a))
      return mul(b, a);
    if (isImm(b) && immValue(b) == 1)
      return a;
    if (isImm(b) && immValue(b) == 0)
      return "0";
    std::string r = b64();
    if (isImm(b) && llvm::isPowerOf2_64(immValue(b)))
      os << "\tshl.b64 " << r << ", " << a << ", " << llvm::Log2_64(immValue(b)) << ";\n";
    else
      os << "\tmul.lo.s64 " << r << ", " << a << ", " << b << ";\n";
    return r;
  }
  /// a + b * c
  std::string madd(const std::string &a, const std::string &b, const std::string &c) {
    return add(a, mul(b, c));
  }

  // ---- predicates ---------------------------------------------------------
  /// a < b (signed 64-bit).
  Pred lessThan(const std::string &a, const std::string &b) {
    if (isImm(a) && isImm(b))
      return Pred::of(immValue(a) < immValue(b));
    Pred p{Pred::Reg, pred()};
    if (isImm(a)) // a < b  <=>  b > a
      os << "\tsetp.gt.s64 " << p.reg << ", " << b << ", " << a << ";\n";
    else
      os << "\tsetp.lt.s64 " << p.reg << ", " << a << ", " << b << ";\n";
    return p;
  }
  Pred both(const Pred &a, const Pred &b) {
    if (a.kind == Pred::False || b.kind == Pred::False)
      return Pred::of(false);
    if (a.kind == Pred::True)
      return b;
    if (b.kind == Pred::True)
      return a;
    Pred p{Pred::Reg, pred()};
    os << "\tand.pred " << p.reg << ", " << a.reg << ", " << b.reg << ";\n";
    return p;
  }
  Pred isZero(const std::string &v) {
    Pred p{Pred::Reg, pred()};
    os << "\tsetp.eq.s64 " << p.reg << ", " << v << ", 0;\n";
    return p;
  }
  /// The guard that runs an instruction under `p` ("" when always).
  static std::string guard(const Pred &p) { return p.kind == Pred::Reg ? "@" + p.reg + " " : ""; }

  // ---- element conversions ------------------------------------------------
  /// Element i of `f` as an f32 operand.
  std::string elemF32(const Frag &f, int64_t i) {
    if (f.kind == Frag::F32)
      return f.ops[i];
    const std::string &w = f.ops[i / 2];
    bool high = i % 2;
    std::string r = f32();
    if (f.elem.isBF16()) {
      std::string t = b32();
      if (high)
        os << "\tand.b32 " << t << ", " << w << ", -65536;\n";
      else
        os << "\tshl.b32 " << t << ", " << w << ", 16;\n";
      os << "\tmov.b32 " << r << ", " << t << ";\n";
    } else {
      os << "\t{\n\t.reg .b16 lo, hi;\n\tmov.b32 {lo, hi}, " << w << ";\n\tcvt.f32.f16 " << r
         << ", " << (high ? "hi" : "lo") << ";\n\t}\n";
    }
    return r;
  }

  /// `f` with elements of type `to` (f32, bf16 or f16).
  Frag convert(const Frag &f, Type to) {
    if (f.elem == to)
      return f;
    Frag r;
    r.elem = to;
    r.count = f.count;
    if (to.isF32()) {
      r.kind = Frag::F32;
      for (int64_t i = 0; i < f.count; ++i)
        r.ops.push_back(elemF32(f, i));
      return r;
    }
    r.kind = Frag::Words;
    const char *cvt = to.isBF16() ? "cvt.rn.bf16x2.f32" : "cvt.rn.f16x2.f32";
    for (int64_t i = 0; i < f.count; i += 2) {
      std::string lo = elemF32(f, i), hi = i + 1 < f.count ? elemF32(f, i + 1) : f32Imm(0.0f);
      std::string w = b32();
      os << "\t" << cvt << " " << w << ", " << hi << ", " << lo << ";\n";
      r.ops.push_back(w);
    }
    return r;
  }

  // ---- kernel set-up ------------------------------------------------------
  llvm::Error writeParams(std::string &header);
  const Geometry &geometryFor(int64_t colThreads) { return geometry.at(colThreads); }

  // ---- operations ---------------------------------------------------------
  llvm::Error emitBlock(Block &block);
  llvm::Error emitOp(Operation *op);
  llvm::Error emitFor(scf::ForOp op);
  llvm::Error emitLoad(LoadOp op);
  llvm::Error emitStore(StoreOp op);
  llvm::Error emitReduce(ReduceOp op);
  llvm::Error emitElementwise(Operation *op, StringRef opcode);
  void emitClusterSync() {
    os << "\tbarrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;\n";
  }

  /// Where this thread's part of a tile access lies.
  struct Place {
    Pred ok;           // the row (and leading indices) exist
    std::string ptr;   // address of the thread's first element
    std::string col;   // column of the thread's first element
    std::string ncols; // the operand's row length
    int64_t col0 = -1; // the tile's first column, when constant
    int64_t vec = 1, colThreads = 1, chunks = 1;
  };
  Place place(Value memref, ValueRange indices, RankedTensorType tile, Pred extra);
  /// Chunk k is whole for every lane (the device library's fullChunks).
  static bool wholeChunk(const Place &pl, int64_t k, int64_t cols) {
    if (cols < 0 || pl.col0 < 0 || pl.col0 >= cols)
      return false;
    return k < (cols - pl.col0) / (pl.colThreads * pl.vec);
  }
  /// One access of up to 16 bytes: the registers it moves (of `m`, the
  /// fragment in the memory's representation) and its byte offset from the
  /// thread's first element.
  struct VectorAccess {
    SmallVector<std::string> regs;
    int64_t offset;
  };
  static SmallVector<VectorAccess> vectorAccesses(const Place &pl, int64_t k, int64_t bytes,
                                                  const Frag &m);
  /// What an access does with each run (chunk) of the thread's row.
  struct RunVisitor {
    /// The run's vector accesses, all under `p`.
    std::function<void(int64_t k, const Pred &p)> vector;
    /// The run element by element, element e under `p(e)`.
    std::function<void(int64_t k, const std::function<Pred(int64_t)> &p)> elements;
  };
  /// Walks the runs as the device library does: a run known to be whole, or
  /// in a row whose length is a multiple of vec (so wholly inside or outside
  /// it), moves as vector accesses under one predicate; at a ragged edge of
  /// any other row, a run takes vector accesses when it lies inside, else it
  /// moves element by element (a branch between the two).
  void forEachRun(const Place &pl, int64_t cols, int64_t bytes, const RunVisitor &v);
};

// ---- parameters --------------------------------------------------------------

llvm::Error KernelWriter::writeParams(std::string &header) {
  llvm::raw_string_ostream hs(header);
  std::string name = kernel.getSymName().str();
  hs << ".visible .entry " << name << "(";
  for (auto [i, arg] : llvm::enumerate(kernel.getBody().getArguments())) {
    std::string param = name + "_param_" + std::to_string(i);
    hs << (i ? ",\n" : "\n") << "\t.param ";
    Arg a;
    a.type = arg.getType();
    if (auto m = dyn_cast<MemRefType>(a.type)) {
      hs << ".align 8 .b8 " << param << "[" << 8 + 8 * m.getRank() << "]";
      a.ptr = b64();
      os << "\tld.param.u64 " << a.ptr << ", [" << param << "];\n";
      os << "\tcvta.to.global.u64 " << a.ptr << ", " << a.ptr << ";\n";
      for (int64_t d = 0; d < m.getRank(); ++d) {
        if (!m.isDynamicDim(d)) {
          a.sizes.push_back(std::to_string(m.getDimSize(d)));
          continue;
        }
        std::string s = b64();
        os << "\tld.param.u64 " << s << ", [" << param << "+" << 8 + 8 * d << "];\n";
        a.sizes.push_back(s);
      }
    } else if (a.type.isF32()) {
      hs << ".f32 " << param;
      a.scalar = f32();
      os << "\tld.param.f32 " << a.scalar << ", [" << param << "];\n";
      vals[arg] = Frag{Frag::F32, a.type, 1, {a.scalar}};
    } else if (a.type.isIndex()) {
      hs << ".u64 " << param;
      a.scalar = b64();
      os << "\tld.param.u64 " << a.scalar << ", [" << param << "];\n";
      vals[arg] = Frag{Frag::Index, a.type, 1, {a.scalar}};
    } else {
      return unsupported(kernel, "argument of type that is not a memref, f32 or index");
    }
    args[arg] = std::move(a);
  }
  hs << "\n)\n.maxntid " << kernel.getBlockThreads() << ", 1, 1\n";
  if (auto m = kernel.getMinBlocks())
    hs << ".minnctapersm " << *m << "\n";
  if (clusterBlocks > 1)
    hs << ".explicitcluster\n.reqnctapercluster " << clusterBlocks << ", 1, 1\n";
  return llvm::Error::success();
}

llvm::Error KernelWriter::write(std::string &out) {
  clusterBlocks = kernel.getClusterBlocks();
  if (auto s = kernel.getScratchBytes())
    scratchBytes = int64_t(*s);
  else
    return unsupported(kernel, "kernel without scratch_bytes (run tile-allocate-shared)");

  // Everything a kernel computes up front, so that every later use, inside
  // loops or not, finds it defined: the arguments, the thread's geometry for
  // each layout, the shared memory's addresses.
  std::string header;
  if (auto err = writeParams(header))
    return err;
  std::set<int64_t> colThreads;
  bool clusterReduce = false;
  kernel.walk([&](Operation *op) {
    auto note = [&](Type t) {
      if (auto tensor = dyn_cast<RankedTensorType>(t))
        if (auto layout = getBlockedParent(tensor))
          colThreads.insert(layout.getColThreads());
    };
    for (Type t : op->getResultTypes())
      note(t);
    for (Type t : op->getOperandTypes())
      note(t);
    if (auto reduce = dyn_cast<ReduceOp>(op); reduce && reduce.getCluster()) {
      clusterReduce = true;
      auto layout = cast<BlockedLayoutAttr>(reduce.getOperand().getType().getEncoding());
      clusterRows = std::max(clusterRows, layout.getRowThreads());
    }
  });
  if (clusterReduce && clusterBlocks < 2)
    return unsupported(kernel, "cluster reduction in a kernel that does not run in clusters");
  tid32 = b32();
  tid64 = b64();
  os << "\tmov.u32 " << tid32 << ", %tid.x;\n\tcvt.u64.u32 " << tid64 << ", " << tid32 << ";\n";
  for (int64_t tc : colThreads) {
    Geometry g{b64(), b64()};
    os << "\tshr.u64 " << g.row << ", " << tid64 << ", " << llvm::Log2_64(tc) << ";\n";
    os << "\tand.b64 " << g.lane << ", " << tid64 << ", " << tc - 1 << ";\n";
    geometry[tc] = g;
  }
  std::string name = kernel.getSymName().str();
  std::string shared;
  if (scratchBytes > 0) {
    shared +=
        "\t.shared .align 4 .b8 " + name + "_scratch[" + std::to_string(scratchBytes) + "];\n";
    scratchAddr = b32();
    os << "\tmov.u32 " << scratchAddr << ", " << name << "_scratch;\n";
  }
  if (clusterReduce) {
    // float slots[2][C][rows], then two 8-byte transaction barriers.
    clusterBarsOffset = llvm::alignTo(2 * clusterBlocks * clusterRows * 4, 8);
    shared += "\t.shared .align 8 .b8 " + name + "_cluster[" +
              std::to_string(clusterBarsOffset + 16) + "];\n";
    clusterAddr = b32();
    round = b32();
    os << "\tmov.u32 " << clusterAddr << ", " << name << "_cluster;\n";
    os << "\tmov.u32 " << round << ", 0;\n";
    Pred first{Pred::Reg, pred()};
    os << "\tsetp.eq.u32 " << first.reg << ", " << tid32 << ", 0;\n";
    for (int i = 0; i < 2; ++i)
      os << "\t" << guard(first) << "mbarrier.init.shared::cta.b64 [" << clusterAddr << "+"
         << clusterBarsOffset + 8 * i << "], 1;\n";
    os << "\t" << guard(first) << "fence.mbarrier_init.release.cluster;\n";
    emitClusterSync();
  }

  // Loads of an operand the kernel also stores go through the coherent path.
  kernel.walk([&](LoadOp load) {
    bool written = isStoredTo(load.getSource());
    loadCache[load] = written               ? CacheOp::Coherent
                      : load.getStreaming() ? CacheOp::Stream
                                            : CacheOp::Cached;
  });

  if (auto err = emitBlock(kernel.getBody().front()))
    return err;

  out += header;
  out += "{\n";
  auto decl = [&](const char *type, const char *prefix, int n) {
    if (n)
      out += std::string("\t.reg .") + type + " " + prefix + "<" + std::to_string(n) + ">;\n";
  };
  decl("pred", "%p", nPred);
  decl("b32", "%r", nB32);
  decl("b64", "%rd", nB64);
  decl("f32", "%f", nF32);
  out += shared;
  out += body;
  out += "}\n";
  return llvm::Error::success();
}

// ---- operations --------------------------------------------------------------

llvm::Error KernelWriter::emitBlock(Block &block) {
  for (Operation &op : block)
    if (auto err = emitOp(&op))
      return err;
  return llvm::Error::success();
}

llvm::Error KernelWriter::emitOp(Operation *op) {
  auto index = [&](Value v) -> std::string { return vals.at(v).ops[0]; };
  auto setIndex = [&](Value v, std::string op) {
    vals[v] = Frag{Frag::Index, v.getType(), 1, {std::move(op)}};
  };
  auto special = [&](Value result, const char *reg) {
    std::string r32 = b32(), r = b64();
    os << "\tmov.u32 " << r32 << ", " << reg << ";\n\tcvt.u64.u32 " << r << ", " << r32 << ";\n";
    setIndex(result, r);
  };

  if (auto c = dyn_cast<arith::ConstantOp>(op)) {
    Attribute v = c.getValue();
    if (auto f = dyn_cast<FloatAttr>(v); f && f.getType().isF32()) {
      vals[c] = Frag{Frag::F32, f.getType(), 1, {f32Imm(float(f.getValueAsDouble()))}};
      return llvm::Error::success();
    }
    if (auto i = dyn_cast<IntegerAttr>(v); i && c.getType().isIndex()) {
      setIndex(c, std::to_string(i.getInt()));
      return llvm::Error::success();
    }
    return unsupported(op, "a constant that is not an f32 or index scalar");
  }
  if (auto pid = dyn_cast<ProgramIdOp>(op)) {
    special(pid, clusterBlocks > 1 ? "%clusterid.x" : "%ctaid.x");
    return llvm::Error::success();
  }
  if (auto np = dyn_cast<NumProgramsOp>(op)) {
    special(np, clusterBlocks > 1 ? "%nclusterid.x" : "%nctaid.x");
    return llvm::Error::success();
  }
  if (auto rank = dyn_cast<ClusterRankOp>(op)) {
    special(rank, "%cluster_ctarank");
    return llvm::Error::success();
  }
  if (auto dim = dyn_cast<memref::DimOp>(op)) {
    std::optional<int64_t> d = dim.getConstantIndex();
    auto it = args.find(dim.getSource());
    if (!d || it == args.end())
      return unsupported(op, "a size of a kernel argument, by constant dimension, is lowered");
    setIndex(dim, it->second.sizes[*d]);
    return llvm::Error::success();
  }
  if (isa<arith::AddIOp, arith::SubIOp, arith::MulIOp, arith::DivUIOp, arith::RemUIOp,
          arith::DivSIOp, arith::RemSIOp, arith::MinUIOp, arith::MaxUIOp, arith::MinSIOp,
          arith::MaxSIOp>(op)) {
    if (!op->getResult(0).getType().isIndex())
      return unsupported(op, "integer arithmetic other than on index");
    std::string a = index(op->getOperand(0)), b = index(op->getOperand(1));
    if (isa<arith::AddIOp>(op)) {
      setIndex(op->getResult(0), add(a, b));
      return llvm::Error::success();
    }
    if (isa<arith::MulIOp>(op)) {
      setIndex(op->getResult(0), mul(a, b));
      return llvm::Error::success();
    }
    const char *opcode = llvm::TypeSwitch<Operation *, const char *>(op)
                             .Case([](arith::SubIOp) { return "sub.s64"; })
                             .Case([](arith::DivUIOp) { return "div.u64"; })
                             .Case([](arith::RemUIOp) { return "rem.u64"; })
                             .Case([](arith::DivSIOp) { return "div.s64"; })
                             .Case([](arith::RemSIOp) { return "rem.s64"; })
                             .Case([](arith::MinUIOp) { return "min.u64"; })
                             .Case([](arith::MaxUIOp) { return "max.u64"; })
                             .Case([](arith::MinSIOp) { return "min.s64"; })
                             .Default([](Operation *) { return "max.s64"; });
    std::string r = b64();
    os << "\t" << opcode << " " << r << ", " << inReg(a) << ", " << b << ";\n";
    setIndex(op->getResult(0), r);
    return llvm::Error::success();
  }
  // f32 arithmetic, element by element: the instructions CUDA C++ compiles
  // these to without fast-math (rsqrtf is rsqrt.approx; a mul or add with no
  // rounding mode may be fused by ptxas, as NVRTC's --fmad=true allows).
  const char *elementwise = llvm::TypeSwitch<Operation *, const char *>(op)
                                .Case([](arith::AddFOp) { return "add.f32"; })
                                .Case([](arith::SubFOp) { return "sub.f32"; })
                                .Case([](arith::MulFOp) { return "mul.f32"; })
                                .Case([](arith::DivFOp) { return "div.rn.f32"; })
                                .Case([](arith::MaximumFOp) { return "max.f32"; })
                                .Case([](arith::MinimumFOp) { return "min.f32"; })
                                .Case([](arith::NegFOp) { return "neg.f32"; })
                                .Case([](math::RsqrtOp) { return "rsqrt.approx.f32"; })
                                .Case([](math::SqrtOp) { return "sqrt.rn.f32"; })
                                .Case([](math::AbsFOp) { return "abs.f32"; })
                                .Default([](Operation *) { return nullptr; });
  if (elementwise)
    return emitElementwise(op, elementwise);
  if (isa<arith::ExtFOp, arith::TruncFOp>(op)) {
    auto type = dyn_cast<RankedTensorType>(op->getResult(0).getType());
    if (!type)
      return unsupported(op, "scalar conversion");
    vals[op->getResult(0)] = convert(vals.at(op->getOperand(0)), type.getElementType());
    return llvm::Error::success();
  }
  if (auto splat = dyn_cast<SplatOp>(op)) {
    Frag s = vals.at(splat.getValue());
    int64_t n = getElemsPerThread(splat.getType());
    vals[splat] =
        Frag{Frag::F32, splat.getType().getElementType(), n, SmallVector<std::string>(n, s.ops[0])};
    return llvm::Error::success();
  }
  if (auto bc = dyn_cast<BroadcastOp>(op)) {
    Frag in = vals.at(bc.getOperand());
    auto slice = cast<SliceLayoutAttr>(bc.getOperand().getType().getEncoding());
    if (slice.getDim() == 0) { // a row of columns is held as the tile's columns are
      vals[bc] = in;
      return llvm::Error::success();
    }
    int64_t n = getElemsPerThread(bc.getType());
    if (in.kind != Frag::F32)
      in = convert(in, Float32Type::get(op->getContext()));
    vals[bc] = Frag{Frag::F32, in.elem, n, SmallVector<std::string>(n, in.ops[0])};
    return llvm::Error::success();
  }
  if (auto load = dyn_cast<LoadOp>(op))
    return emitLoad(load);
  if (auto store = dyn_cast<StoreOp>(op))
    return emitStore(store);
  if (auto reduce = dyn_cast<ReduceOp>(op))
    return emitReduce(reduce);
  if (auto loop = dyn_cast<scf::ForOp>(op))
    return emitFor(loop);
  if (isa<ReturnOp>(op)) {
    // No block of a cluster leaves while another may still read its shared
    // memory.
    if (clusterBlocks > 1)
      emitClusterSync();
    os << "\tret;\n";
    return llvm::Error::success();
  }
  return unsupported(op, "no PTX lowering");
}

llvm::Error KernelWriter::emitElementwise(Operation *op, StringRef opcode) {
  Type type = op->getResult(0).getType();
  if (!(isa<RankedTensorType>(type) || type.isF32()))
    return unsupported(op, "not an f32 tile or scalar");
  SmallVector<const Frag *> ins;
  for (Value v : op->getOperands()) {
    const Frag &f = vals.at(v);
    if (f.kind != Frag::F32)
      return unsupported(op, "operand that is not f32");
    ins.push_back(&f);
  }
  Frag r{Frag::F32, ins[0]->elem, ins[0]->count, {}};
  for (int64_t i = 0; i < r.count; ++i) {
    std::string d = f32();
    os << "\t" << opcode << " " << d;
    for (const Frag *f : ins)
      os << ", " << f->ops[f->count == 1 ? 0 : i];
    os << ";\n";
    r.ops.push_back(d);
  }
  vals[op->getResult(0)] = std::move(r);
  return llvm::Error::success();
}

llvm::Error KernelWriter::emitFor(scf::ForOp loop) {
  auto index = [&](Value v) { return vals.at(v).ops[0]; };
  std::string iv = b64();
  os << "\tmov.b64 " << iv << ", " << index(loop.getLowerBound()) << ";\n";
  vals[loop.getInductionVar()] = Frag{Frag::Index, loop.getInductionVar().getType(), 1, {iv}};
  // Loop-carried values live in registers of their own, copied in on entry
  // and on each yield.
  SmallVector<Frag> carried;
  for (auto [init, arg] : llvm::zip(loop.getInitArgs(), loop.getRegionIterArgs())) {
    Frag in = vals.at(init), c = in;
    for (auto [i, o] : llvm::enumerate(in.ops)) {
      c.ops[i] = fresh(in.kind);
      os << "\tmov." << movType(in.kind) << " " << c.ops[i] << ", " << o << ";\n";
    }
    vals[arg] = c;
    carried.push_back(c);
  }
  std::string head = label(), exit = label();
  Pred done{Pred::Reg, pred()};
  os << head << ":\n";
  os << "\tsetp.ge.s64 " << done.reg << ", " << iv << ", " << index(loop.getUpperBound()) << ";\n";
  os << "\t@" << done.reg << " bra " << exit << ";\n";
  for (Operation &op : loop.getBody()->without_terminator())
    if (auto err = emitOp(&op))
      return err;
  // The yield: a parallel copy (a yielded value may be another carried
  // register), through temporaries when any source is also a destination.
  auto yield = cast<scf::YieldOp>(loop.getBody()->getTerminator());
  struct Copy {
    std::string dst, src;
    Frag::Kind kind;
  };
  SmallVector<Copy> copies;
  llvm::StringSet<> dsts;
  for (auto [i, v] : llvm::enumerate(yield.getOperands())) {
    const Frag &src = vals.at(v);
    for (auto [j, o] : llvm::enumerate(src.ops))
      if (o != carried[i].ops[j]) {
        copies.push_back({carried[i].ops[j], o, src.kind});
        dsts.insert(carried[i].ops[j]);
      }
  }
  if (llvm::any_of(copies, [&](const Copy &c) { return dsts.contains(c.src); })) {
    for (Copy &c : copies) {
      std::string t = fresh(c.kind);
      os << "\tmov." << movType(c.kind) << " " << t << ", " << c.src << ";\n";
      c.src = t;
    }
  }
  for (const Copy &c : copies)
    os << "\tmov." << movType(c.kind) << " " << c.dst << ", " << c.src << ";\n";
  os << "\tadd.s64 " << iv << ", " << iv << ", " << index(loop.getStep()) << ";\n";
  os << "\tbra " << head << ";\n" << exit << ":\n";
  for (auto [res, c] : llvm::zip(loop.getResults(), carried))
    vals[res] = c;
  return llvm::Error::success();
}

// ---- memory ------------------------------------------------------------------

/// The device library's tile_row / leading / lane arithmetic.
KernelWriter::Place KernelWriter::place(Value memref, ValueRange indices, RankedTensorType tile,
                                        Pred extra) {
  const Arg &a = args.at(memref);
  auto type = cast<MemRefType>(memref.getType());
  int64_t rank = type.getRank(), bytes = elemBytes(type.getElementType());
  BlockedLayoutAttr layout = getBlockedParent(tile);
  const Geometry &g = geometryFor(layout.getColThreads());
  auto slice = dyn_cast<SliceLayoutAttr>(tile.getEncoding());
  int64_t tileRank = slice ? 1 : 2;
  SmallVector<std::string> idx;
  for (Value v : indices)
    idx.push_back(vals.at(v).ops[0]);

  Place pl;
  pl.ok = extra;
  std::string off = "0";
  for (int64_t d = 0; d < rank - tileRank; ++d) {
    pl.ok = both(pl.ok, lessThan(idx[d], a.sizes[d]));
    off = madd(idx[d], off, a.sizes[d]);
  }
  for (int64_t d = rank - tileRank; d < rank; ++d)
    off = mul(off, a.sizes[d]);
  pl.ncols = a.sizes[rank - 1];
  pl.vec = layout.getVec();
  pl.colThreads = layout.getColThreads();
  if (slice && slice.getDim() == 1) {
    // One value per row of threads.
    std::string row = add(idx[rank - 1], g.row);
    pl.ok = both(pl.ok, lessThan(row, a.sizes[rank - 1]));
    pl.col = row;
    pl.ptr = add(a.ptr, mul(add(off, row), std::to_string(bytes)));
    return pl;
  }
  if (!slice) {
    std::string row = add(idx[rank - 2], g.row);
    pl.ok = both(pl.ok, lessThan(row, a.sizes[rank - 2]));
    off = madd(off, row, pl.ncols);
  }
  pl.chunks = layout.getChunks(tile.getShape().back());
  pl.col = madd(idx[rank - 1], g.lane, std::to_string(pl.vec));
  if (isImm(idx[rank - 1]))
    pl.col0 = immValue(idx[rank - 1]);
  pl.ptr = add(a.ptr, mul(add(off, pl.col), std::to_string(bytes)));
  return pl;
}

namespace {
const char *loadOpcode(CacheOp c) {
  return c == CacheOp::Coherent ? "ld.global"
         : c == CacheOp::Stream ? "ld.global.nc.L1::no_allocate"
                                : "ld.global.nc";
}
std::string braced(ArrayRef<std::string> regs) {
  if (regs.size() == 1)
    return regs[0];
  std::string s = "{";
  for (auto [i, r] : llvm::enumerate(regs))
    s += (i ? ", " : "") + r;
  return s + "}";
}
std::string vecSuffix(size_t n) { return n == 1 ? "" : ".v" + std::to_string(n); }
} // namespace

SmallVector<KernelWriter::VectorAccess> KernelWriter::vectorAccesses(const Place &pl, int64_t k,
                                                                     int64_t bytes, const Frag &m) {
  bool words = m.kind == Frag::Words;
  int64_t runBytes = pl.vec * bytes;
  int64_t w = runBytes >= 16 ? 4 : runBytes / 4, perAccess = w * 4 / bytes;
  SmallVector<VectorAccess> out;
  for (int64_t g = 0; g < pl.vec / perAccess; ++g) {
    int64_t first = k * pl.vec + g * perAccess; // element index in the fragment
    VectorAccess a;
    for (int64_t i = 0; i < w; ++i)
      a.regs.push_back(m.ops[words ? first / 2 + i : first + i]);
    a.offset = (k * pl.colThreads * pl.vec + g * perAccess) * bytes;
    out.push_back(std::move(a));
  }
  return out;
}

void KernelWriter::forEachRun(const Place &pl, int64_t cols, int64_t bytes, const RunVisitor &v) {
  int64_t vec = pl.vec;
  bool vectors = vec * bytes >= 4, even = cols >= 0 && cols % vec == 0;
  for (int64_t k = 0; k < pl.chunks; ++k) {
    bool full = wholeChunk(pl, k, cols);
    // The run's first column (only where a column is checked).
    std::string ck = full ? "" : add(pl.col, std::to_string(k * pl.colThreads * vec));
    auto element = [&](int64_t e) {
      return full ? pl.ok : both(pl.ok, lessThan(add(ck, std::to_string(e)), pl.ncols));
    };
    if (vectors && (full || even)) {
      v.vector(k, full ? pl.ok : both(pl.ok, lessThan(ck, pl.ncols)));
      continue;
    }
    if (vectors) {
      Pred whole = both(pl.ok, lessThan(add(ck, std::to_string(vec - 1)), pl.ncols));
      std::string elementwise = label(), done = label();
      if (whole.kind == Pred::Reg)
        os << "\t@!" << whole.reg << " bra " << elementwise << ";\n";
      if (whole.kind != Pred::False)
        v.vector(k, Pred::of(true));
      os << "\tbra " << done << ";\n" << elementwise << ":\n";
      v.elements(k, element);
      os << done << ":\n";
      continue;
    }
    v.elements(k, element);
  }
}

llvm::Error KernelWriter::emitLoad(LoadOp op) {
  RankedTensorType tile = op.getType();
  auto mem = cast<MemRefType>(op.getSource().getType());
  Type memElem = mem.getElementType();
  bool words = !memElem.isF32();
  int64_t bytes = elemBytes(memElem), cols = mem.getShape().back();
  float pad = op.getPadding() ? float(op.getPadding()->convertToDouble()) : 0.0f;
  uint32_t padElem = padBits(memElem, pad);
  std::string padOp = words ? std::to_string(padElem) : f32Imm(pad);
  std::string padWord = words ? std::to_string(padElem | (padElem << 16)) : padOp;
  const char *ld = loadOpcode(loadCache.at(op));
  const char *scalarType = words ? "u16" : "f32";
  Place pl = place(op.getSource(), op.getIndices(), tile, Pred::of(true));

  int64_t n = getElemsPerThread(tile);
  Frag m{words ? Frag::Words : Frag::F32, memElem, n, {}};
  auto newReg = [&] { return words ? b32() : f32(); };
  // One element at offset `e` (elements from the thread's first) into `dst`,
  // under `p`; 16-bit elements land in the low half of a .b32.
  auto loadElem = [&](const std::string &dst, int64_t e, const Pred &p) {
    if (p.kind == Pred::False)
      return;
    os << "\t" << guard(p) << ld << "." << scalarType << " " << dst << ", [" << pl.ptr << "+"
       << e * bytes << "];\n";
  };
  auto init = [&](const std::string &dst, const std::string &v) {
    os << "\tmov." << (words ? "b32" : "f32") << " " << dst << ", " << v << ";\n";
  };
  // Two 16-bit elements (low halves) into one word.
  auto pair = [&](const std::string &w, const std::string &lo, const std::string &hi) {
    os << "\tprmt.b32 " << w << ", " << lo << ", " << hi << ", 21520;\n"; // 0x5410
  };

  auto slice = dyn_cast<SliceLayoutAttr>(tile.getEncoding());
  if (slice && slice.getDim() == 1) {
    std::string e = newReg();
    if (pl.ok.kind != Pred::True)
      init(e, padOp);
    loadElem(e, 0, pl.ok);
    m.ops.push_back(e); // a 16-bit element alone, in the low half
    vals[op] = convert(m, tile.getElementType());
    return llvm::Error::success();
  }

  int64_t vec = pl.vec;
  int64_t nRegs = words ? (n + 1) / 2 : n;
  for (int64_t i = 0; i < nRegs; ++i)
    m.ops.push_back(newReg());
  SmallVector<std::string> elems(n); // element-wise loads of 16-bit values
  RunVisitor visit;
  visit.vector = [&](int64_t k, const Pred &p) {
    for (const VectorAccess &a : vectorAccesses(pl, k, bytes, m)) {
      if (p.kind != Pred::True)
        for (const std::string &r : a.regs)
          init(r, padWord);
      if (p.kind == Pred::False)
        continue;
      os << "\t" << guard(p) << ld << vecSuffix(a.regs.size()) << "." << (words ? "b32" : "f32")
         << " " << braced(a.regs) << ", [" << pl.ptr << "+" << a.offset << "];\n";
    }
  };
  visit.elements = [&](int64_t k, const std::function<Pred(int64_t)> &p) {
    for (int64_t e = 0; e < vec; ++e) {
      int64_t i = k * vec + e;
      std::string dst = words ? b32() : m.ops[i];
      init(dst, padOp);
      loadElem(dst, k * pl.colThreads * vec + e, p(e));
      elems[i] = dst;
    }
    if (words && vec % 2 == 0)
      for (int64_t i = k * vec; i < k * vec + vec; i += 2)
        pair(m.ops[i / 2], elems[i], elems[i + 1]);
  };
  forEachRun(pl, cols, bytes, visit);
  if (words && vec % 2 == 1)
    for (int64_t i = 0; i < n; i += 2)
      pair(m.ops[i / 2], elems[i], i + 1 < n ? elems[i + 1] : elems[i]);
  vals[op] = convert(m, tile.getElementType());
  return llvm::Error::success();
}

llvm::Error KernelWriter::emitStore(StoreOp op) {
  RankedTensorType tile = op.getValue().getType();
  auto mem = cast<MemRefType>(op.getDest().getType());
  Type memElem = mem.getElementType();
  bool words = !memElem.isF32();
  int64_t bytes = elemBytes(memElem), cols = mem.getShape().back();
  const char *st = op.getStreaming() ? "st.global.cs" : "st.global";
  const char *scalarType = words ? "u16" : "f32";
  auto slice = dyn_cast<SliceLayoutAttr>(tile.getEncoding());
  BlockedLayoutAttr layout = getBlockedParent(tile);
  const Geometry &g = geometryFor(layout.getColThreads());
  // Rows of columns: only the first row of threads writes; one value per row:
  // only lane 0 of each row.
  Pred extra = Pred::of(true);
  if (slice)
    extra = isZero(slice.getDim() == 0 ? g.row : g.lane);
  Place pl = place(op.getDest(), op.getIndices(), tile, extra);
  Frag m = convert(vals.at(op.getValue()), memElem);

  // Element i of the fragment, for a 16-bit store from the low half.
  auto elem = [&](int64_t i) -> std::string {
    if (!words)
      return m.ops[i];
    if (i % 2 == 0)
      return m.ops[i / 2];
    std::string t = b32();
    os << "\tshr.u32 " << t << ", " << m.ops[i / 2] << ", 16;\n";
    return t;
  };
  auto storeElem = [&](int64_t i, int64_t e, const Pred &p) {
    if (p.kind == Pred::False)
      return;
    std::string v = elem(i);
    os << "\t" << guard(p) << st << "." << scalarType << " [" << pl.ptr << "+" << e * bytes << "], "
       << v << ";\n";
  };
  if (slice && slice.getDim() == 1) {
    storeElem(0, 0, pl.ok);
    return llvm::Error::success();
  }
  RunVisitor visit;
  visit.vector = [&](int64_t k, const Pred &p) {
    if (p.kind == Pred::False)
      return;
    for (const VectorAccess &a : vectorAccesses(pl, k, bytes, m))
      os << "\t" << guard(p) << st << vecSuffix(a.regs.size()) << "." << (words ? "b32" : "f32")
         << " [" << pl.ptr << "+" << a.offset << "], " << braced(a.regs) << ";\n";
  };
  visit.elements = [&](int64_t k, const std::function<Pred(int64_t)> &p) {
    for (int64_t e = 0; e < pl.vec; ++e)
      storeElem(k * pl.vec + e, k * pl.colThreads * pl.vec + e, p(e));
  };
  forEachRun(pl, cols, bytes, visit);
  return llvm::Error::success();
}

// ---- reductions ----------------------------------------------------------------

llvm::Error KernelWriter::emitReduce(ReduceOp op) {
  const Frag &x = vals.at(op.getOperand());
  auto layout = cast<BlockedLayoutAttr>(op.getOperand().getType().getEncoding());
  int64_t tr = layout.getRowThreads(), tc = layout.getColThreads(), k = x.count;
  const Geometry &g = geometryFor(tc);
  const char *combine = op.getKind() == ReduceKind::sum   ? "add.f32"
                        : op.getKind() == ReduceKind::max ? "max.f32"
                                                          : "min.f32";
  auto comb = [&](const std::string &a, const std::string &b) {
    std::string r = f32();
    os << "\t" << combine << " " << r << ", " << a << ", " << b << ";\n";
    return r;
  };
  // A shared address: base + 4 * (64-bit index register) + constant bytes.
  auto sharedAt = [&](const std::string &base, const std::string &index) {
    std::string i32 = b32(), r = b32();
    os << "\tcvt.u32.u64 " << i32 << ", " << index << ";\n";
    os << "\tshl.b32 " << i32 << ", " << i32 << ", 2;\n";
    os << "\tadd.u32 " << r << ", " << base << ", " << i32 << ";\n";
    return r;
  };

  if (op.getDim() == 0) {
    if (tr == 1) {
      vals[op] = x;
      return llvm::Error::success();
    }
    // Each row of threads writes its K values, then each lane sums its
    // column over the rows in order.
    os << "\tbar.sync 0;\n";
    std::string w = sharedAt(scratchAddr, add(mul(g.row, std::to_string(k * tc)), g.lane));
    for (int64_t j = 0; j < k; ++j)
      os << "\tst.shared.f32 [" << w << "+" << j * tc * 4 << "], " << x.ops[j] << ";\n";
    os << "\tbar.sync 0;\n";
    std::string r = sharedAt(scratchAddr, g.lane);
    Frag out{Frag::F32, x.elem, k, {}};
    for (int64_t j = 0; j < k; ++j) {
      std::string acc;
      for (int64_t q = 0; q < tr; ++q) {
        std::string v = f32();
        os << "\tld.shared.f32 " << v << ", [" << r << "+" << (q * k + j) * tc * 4 << "];\n";
        acc = q ? comb(acc, v) : v;
      }
      out.ops.push_back(acc);
    }
    vals[op] = std::move(out);
    return llvm::Error::success();
  }

  // Along the row: this thread's elements in order, then butterflies within
  // the warp (the same bits in every lane), then across warps through the
  // scratch in a fixed order.
  std::string acc = x.ops[0];
  for (int64_t i = 1; i < k; ++i)
    acc = comb(acc, x.ops[i]);
  for (int64_t off = std::min<int64_t>(tc, 32) / 2; off > 0; off /= 2) {
    std::string t = f32();
    os << "\tshfl.sync.bfly.b32 " << t << ", " << acc << ", " << off << ", 31, -1;\n";
    acc = comb(acc, t);
  }
  if (tc > 32) {
    int64_t warps = tc / 32;
    os << "\tbar.sync 0;\n";
    // tid / 32 is row * warps + lane / 32.
    Pred leader{Pred::Reg, pred()};
    std::string l = b32();
    os << "\tand.b32 " << l << ", " << tid32 << ", 31;\n";
    os << "\tsetp.eq.u32 " << leader.reg << ", " << l << ", 0;\n";
    std::string w32 = b32(), wAddr = b32();
    os << "\tshr.u32 " << w32 << ", " << tid32 << ", 5;\n";
    os << "\tshl.b32 " << w32 << ", " << w32 << ", 2;\n";
    os << "\tadd.u32 " << wAddr << ", " << scratchAddr << ", " << w32 << ";\n";
    os << "\t" << guard(leader) << "st.shared.f32 [" << wAddr << "], " << acc << ";\n";
    os << "\tbar.sync 0;\n";
    std::string r = sharedAt(scratchAddr, mul(g.row, std::to_string(warps)));
    for (int64_t w = 0; w < warps; ++w) {
      std::string v = f32();
      os << "\tld.shared.f32 " << v << ", [" << r << "+" << w * 4 << "];\n";
      acc = w ? comb(acc, v) : v;
    }
  }
  if (!op.getCluster()) {
    vals[op] = Frag{Frag::F32, x.elem, 1, {acc}};
    return llvm::Error::success();
  }

  // Across the blocks of the cluster (reduce.cuh's reduce_row_cluster): lane
  // 0 of each row sends its block's result to every block, itself included,
  // with stores that complete on the receiver's transaction barrier; each
  // block then combines the C results in rank order.
  int64_t c = clusterBlocks;
  std::string set = b32(), parity = b32(), bar = b32(), t = b32();
  os << "\tand.b32 " << set << ", " << round << ", 1;\n";
  os << "\tbfe.u32 " << parity << ", " << round << ", 1, 1;\n";
  os << "\tadd.u32 " << round << ", " << round << ", 1;\n";
  os << "\tshl.b32 " << t << ", " << set << ", 3;\n";
  os << "\tadd.u32 " << bar << ", " << clusterAddr << ", " << t << ";\n";
  os << "\tadd.u32 " << bar << ", " << bar << ", " << clusterBarsOffset << ";\n";
  if (tc <= 32)
    os << "\tbar.sync 0;\n";
  Pred first{Pred::Reg, pred()};
  os << "\tsetp.eq.u32 " << first.reg << ", " << tid32 << ", 0;\n";
  os << "\t" << guard(first) << "mbarrier.arrive.expect_tx.relaxed.cta.shared::cta.b64 _, [" << bar
     << "], " << c * tr * 4 << ";\n";
  // This row's slot in round `set` from this block's rank.
  std::string rank = b32(), slot = b32(), row32 = b32();
  os << "\tmov.u32 " << rank << ", %cluster_ctarank;\n";
  os << "\tcvt.u32.u64 " << row32 << ", " << g.row << ";\n";
  os << "\tmad.lo.u32 " << slot << ", " << set << ", " << c << ", " << rank << ";\n";
  os << "\tmad.lo.u32 " << slot << ", " << slot << ", " << clusterRows << ", " << row32 << ";\n";
  os << "\tshl.b32 " << slot << ", " << slot << ", 2;\n";
  os << "\tadd.u32 " << slot << ", " << slot << ", " << clusterAddr << ";\n";
  Pred laneZero = isZero(g.lane);
  std::string skip = label();
  os << "\t@!" << laneZero.reg << " bra " << skip << ";\n";
  for (int64_t q = 0; q < c; ++q) {
    std::string peerSlot = b32(), peerBar = b32();
    os << "\tmapa.shared::cluster.u32 " << peerSlot << ", " << slot << ", " << q << ";\n";
    os << "\tmapa.shared::cluster.u32 " << peerBar << ", " << bar << ", " << q << ";\n";
    os << "\tst.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [" << peerSlot << "], "
       << acc << ", [" << peerBar << "];\n";
  }
  os << skip << ":\n";
  std::string wait = label();
  Pred ready{Pred::Reg, pred()};
  os << wait << ":\n";
  os << "\tmbarrier.try_wait.parity.shared::cta.b64 " << ready.reg << ", [" << bar << "], "
     << parity << ";\n";
  os << "\t@!" << ready.reg << " bra " << wait << ";\n";
  // slots[set][q][row]
  std::string base = b32();
  os << "\tmul.lo.u32 " << base << ", " << set << ", " << c * clusterRows << ";\n";
  os << "\tadd.u32 " << base << ", " << base << ", " << row32 << ";\n";
  os << "\tshl.b32 " << base << ", " << base << ", 2;\n";
  os << "\tadd.u32 " << base << ", " << base << ", " << clusterAddr << ";\n";
  std::string sum;
  for (int64_t q = 0; q < c; ++q) {
    std::string v = f32();
    os << "\tld.shared.f32 " << v << ", [" << base << "+" << q * clusterRows * 4 << "];\n";
    sum = q ? comb(sum, v) : v;
  }
  vals[op] = Frag{Frag::F32, x.elem, 1, {sum}};
  return llvm::Error::success();
}

} // namespace

llvm::Expected<std::string> translateTileToPtx(ModuleOp module, StringRef arch) {
  std::string out = ".version 9.0\n.target " + arch.str() + "\n.address_size 64\n";
  for (KernelOp kernel : module.getOps<KernelOp>()) {
    out += "\n";
    KernelWriter writer(kernel);
    if (auto err = writer.write(out))
      return err;
  }
  for (Operation &op : module.getBody()->getOperations())
    if (!isa<KernelOp>(op))
      return unsupported(&op, "only tile.kernel ops at module level");
  return out;
}

} // namespace tilejit
