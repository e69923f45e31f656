//===- Store.h - the SQLite tuning store --------------------------*- C++ -*-===//
//
// One SQLite file holds compiled kernels (cubin + PTX, checked by SHA-256 on
// every read), every timing the tuner measured, the winner per tuning key and a
// negative cache of configs that failed to compile, launch or verify.
//
// Promises (each has a test in tests/store):
// - WAL mode with a busy timeout: many processes read and write one file at
//   once; every write is one BEGIN IMMEDIATE transaction, so no reader sees a
//   half-written entry and a process killed at any point leaves the file
//   consistent.
// - A cubin whose SHA-256 no longer matches is deleted and reported, never
//   handed out.
// - A file that is not a SQLite database, fails `PRAGMA quick_check`, or
//   belongs to another application is moved aside (never deleted) and a fresh
//   store made; a store written by a newer tilejit is an error and left alone.
// - The schema is versioned with `PRAGMA user_version` and migrated in steps.
// - A store opened for reading (openForReading) is never created, moved,
//   migrated, switched or written; a new store or an export appears whole or
//   not at all.
// - An import takes only the kernels its caller accepts, and checks every
//   column of the other file before writing anything.
//
// One Store object may be shared by threads (one connection under a mutex).
// The launch path never touches it: the engine keeps loaded kernels in memory.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "llvm/Support/Error.h"

struct sqlite3;
struct sqlite3_stmt;

namespace tilejit {

namespace detail {
struct SqliteClose {
  void operator()(sqlite3 *db) const;
};
struct SqliteFinalize {
  void operator()(sqlite3_stmt *s) const;
};
using SqlitePtr = std::unique_ptr<sqlite3, SqliteClose>;
using SqliteStmtPtr = std::unique_ptr<sqlite3_stmt, SqliteFinalize>;
} // namespace detail

/// A compiled kernel binary.
struct StoredKernel {
  std::string key;       ///< 64 lower-case hex digits: the kernel's identity (the caller's hash)
  std::string spec;      ///< canonical spec text
  std::string config;    ///< canonical config text
  std::string arch;      ///< e.g. "sm_90a"
  std::string toolchain; ///< e.g. "tilejit=0.1.0 nvrtc=13.0 device=<hash>"
  std::vector<char> cubin;
  std::string ptx;
  std::string launch; ///< opaque JSON describing the entries (the caller's format)
  int64_t workspaceBytes = 0;
  std::string sha256;    ///< hex SHA-256 of cubin: computed by putKernel, checked by getKernel
  int64_t createdAt = 0; ///< unix seconds; putKernel sets it when 0 and keeps it otherwise
};

/// One measured candidate.
struct Timing {
  std::string tuneKey; ///< what was tuned: spec (with rows) + arch + toolchain, made by the caller
  std::string config;
  double medianMs = 0, p20Ms = 0, p80Ms = 0;
  int reps = 0;
  std::string gpu; ///< device name
  int smCount = 0, driverVersion = 0, smClockMHz = 0, memClockMHz = 0;
  int64_t createdAt = 0; ///< unix seconds; addTiming sets it when 0
};

/// The chosen config for a tuning key.
struct Winner {
  std::string tuneKey, config;
  /// The stored kernel of that config, or empty. When non-empty it must name a
  /// stored kernel; it becomes empty if that kernel is later deleted (pruned,
  /// or dropped for a bad hash).
  std::string kernelKey;
  double medianMs = 0;
  std::string reason;
  int64_t chosenAt = 0; ///< unix seconds; setWinner sets it when 0
};

/// A config that must not be tried again for a tuning key.
struct Failure {
  std::string tuneKey, config;
  std::string stage; ///< compile | launch | verify
  std::string reason;
  int64_t createdAt = 0; ///< unix seconds; addFailure sets it when 0
};

/// How the store file keeps its journal. WAL lets readers and a writer work at
/// once but needs memory shared by every process that opens the file, so it
/// is only safe when they all run on one host. A rollback journal ("delete")
/// relies on the file system's byte-range locks alone, which network file
/// systems (NFS, Lustre, GPFS, CephFS, ...) provide across hosts.
/// Auto: $TILEJIT_STORE_JOURNAL (wal | delete) if set, else rollback on a
/// network file system and WAL elsewhere. The mode chosen is that of a new
/// store; an existing one keeps its own (Store::open).
enum class JournalMode { Auto, Wal, Rollback };

/// A row of another store's file, as ImportOptions::checkRow sees it.
struct ImportedRow {
  std::string table; ///< kernels | timings | winners | failures
  int64_t rowid = 0;
  /// kernels: the kernel; the others: their tuning key and config.
  const StoredKernel *kernel = nullptr;
  std::string tuneKey, config;
};

/// What `importFrom` takes from another store. Timings, winners and failures
/// are data; a kernel is GPU code that whoever wrote the file chose, and its
/// SHA-256 only shows that it was not damaged on the way. So a kernel is taken
/// only when `acceptKernel` says so (it may compile the kernel's spec and
/// config here and compare the bytes); with no `acceptKernel`, none is, and a
/// winner that names a kernel not taken keeps its config but no kernel (it is
/// compiled here at first use).
struct ImportOptions {
  /// True to take the kernel; false (with `why` set) to leave it.
  std::function<bool(const StoredKernel &k, std::string &why)> acceptKernel;
  /// Checks one row of the other file after the store's own checks and
  /// before anything is written; an error rejects the whole import (none:
  /// every row that passes the store's checks is taken).
  std::function<llvm::Error(const ImportedRow &row)> checkRow;
  /// Every kernel the other file holds, hash checked: for files whose origin
  /// is trusted.
  static ImportOptions trustAll();
};

/// What an import did.
struct ImportReport {
  int64_t rows = 0;        ///< rows written here
  int64_t kernelsLeft = 0; ///< kernels of the other file not taken
  std::string firstLeft;   ///< why the first of them was not taken
};

/// An import refused for what the other file holds (as opposed to a failure
/// to read or write here): its error code is std::errc::invalid_argument.
bool isImportRejection(const llvm::ErrorInfoBase &e);

/// Limits on what an import reads, so that a hostile file cannot make the
/// process use gigabytes: the longest text field, PTX text and cubin.
constexpr int64_t kMaxImportedTextBytes = 64 * 1024;
constexpr int64_t kMaxImportedCodeBytes = 64 * 1024 * 1024;

/// Whether `cubin` is an ELF CUDA binary (EM_CUDA, 64-bit) for `arch`
/// ("sm_90a": SM 90); `problem` says what is wrong when it is not.
bool isCubinFor(const std::vector<char> &cubin, const std::string &arch, std::string &problem);

/// The file system holding `path` (or its nearest existing parent): a name
/// such as "nfs", "lustre" or "ext4/xfs/local", and whether it is shared
/// between hosts.
struct FileSystemInfo {
  std::string name;
  bool network = false;
};
FileSystemInfo fileSystemOf(const std::string &path);

class Store {
public:
  static constexpr int kDefaultBusyTimeoutMs = 10000;
  /// The schema version this build writes and reads.
  static int knownSchemaVersion();

  /// Opens or creates the store at `path` (":memory:" allowed), creating the
  /// parent directory if missing. A file that is not a SQLite database, fails
  /// `PRAGMA quick_check`, or holds another application's tables is moved aside
  /// to "<path>.corrupt-<unixtime>" (with its -wal/-shm/-journal files) and a
  /// fresh store is created; `notice` (if non-null) then receives one line naming
  /// both paths. A store whose schema is newer than this build knows is an error
  /// and the file is not touched. Errors that are not corruption (permissions,
  /// a lock held past the busy timeout, I/O) are returned and nothing is moved.
  /// `busyTimeoutMs`: how long any statement waits for another process's lock.
  /// `journal`: see JournalMode.
  /// A new store is made in a temporary file beside `path` and linked into
  /// place only when complete: a failure (a full disk) leaves no file.
  /// `journal` applies to a new store; an existing one keeps the journal mode
  /// it is in (processes with different settings share it instead of
  /// fighting over it; `notice` says so), except that a store in WAL mode on a
  /// network file system is switched to a rollback journal.
  static llvm::Expected<std::unique_ptr<Store>> open(const std::string &path,
                                                     std::string *notice = nullptr,
                                                     int busyTimeoutMs = kDefaultBusyTimeoutMs,
                                                     JournalMode journal = JournalMode::Auto);
  /// Opens an existing store for reading only: nothing on disk is created,
  /// moved, migrated or switched, and a read-only file or mount serves. A
  /// null store when there is no file at `path`; an error naming the problem
  /// (and the command that would repair it) for a file that is not a store
  /// of this schema version.
  static llvm::Expected<std::unique_ptr<Store>> openForReading(const std::string &path);
  ~Store();
  Store(const Store &) = delete;
  Store &operator=(const Store &) = delete;

  const std::string &path() const { return path_; }
  int schemaVersion() const { return schemaVersion_; }
  /// "wal" or "delete": the journal the file is kept in.
  const std::string &journalMode() const { return journalMode_; }
  /// How long a statement waits for another process's lock before failing.
  void setBusyTimeout(int milliseconds);

  /// Inserts or replaces the kernel with `k.key`; computes `k.sha256`.
  llvm::Error putKernel(StoredKernel k);
  /// nullopt if absent. If the stored cubin's SHA-256 does not match, the row is
  /// deleted (kept in a store opened for reading), `problem` (if non-null) gets
  /// a message naming the key, and nullopt is returned: a corrupt binary is
  /// never handed out.
  llvm::Expected<std::optional<StoredKernel>> getKernel(const std::string &key,
                                                        std::string *problem = nullptr);

  /// Every timing is kept, repeats included.
  llvm::Error addTiming(const Timing &t);
  /// In the order they were added.
  llvm::Expected<std::vector<Timing>> timings(const std::string &tuneKey);
  /// True if a timing for (tuneKey, config) exists: the tuner need not measure it again.
  llvm::Expected<bool> hasTiming(const std::string &tuneKey, const std::string &config);

  /// One winner per tuning key; replaces the previous one.
  llvm::Error setWinner(const Winner &w);
  llvm::Expected<std::optional<Winner>> winner(const std::string &tuneKey);

  /// Transactions this object committed (counted in memory: no lock).
  uint64_t commits() const { return commits_.load(std::memory_order_acquire); }
  /// SQLite's data_version of the file: it changes when another connection
  /// (another process, or another Store on the same file) commits. With
  /// commits(), two equal readings mean that nothing changed in between.
  llvm::Expected<int64_t> dataVersion();
  /// Every winner whose tuning key starts with `prefix` (one spec's winners
  /// under every build identity), the latest chosen first.
  llvm::Expected<std::vector<Winner>> winnersWithPrefix(const std::string &prefix);

  /// The negative cache: one entry per (tuneKey, config), replaced by the latest.
  llvm::Error addFailure(const Failure &f);
  llvm::Expected<std::vector<Failure>> failures(const std::string &tuneKey);
  llvm::Expected<bool> isKnownBad(const std::string &tuneKey, const std::string &config);

  // For `tilejit cache`:
  struct Summary {
    std::string kind; ///< "kernel" or "winner"
    std::string key;  ///< kernel key, or tuning key for a winner
    std::string spec, config, arch;
    int64_t bytes = 0; ///< cubin + PTX bytes of a kernel; 0 for a winner
    int64_t createdAt = 0;
  };
  /// Kernels (oldest first), then winners (by tuning key). A winner's spec and
  /// arch come from its kernel when it names one.
  llvm::Expected<std::vector<Summary>> list();
  /// Checks every kernel's SHA-256, that its binary is an ELF cubin for the
  /// arch its row names, `PRAGMA integrity_check` and `PRAGMA
  /// foreign_key_check`; returns the problems (empty = ok). Deletes nothing.
  llvm::Expected<std::vector<std::string>> verify();
  /// Deletes kernels, timings and failures created, and winners chosen, before
  /// `unixTime`; returns the number of rows deleted.
  llvm::Expected<int64_t> pruneOlderThan(int64_t unixTime);
  /// Writes a consistent copy of the whole store to a new single-file SQLite
  /// database at `path` (rollback journal, so it travels as one file). Refuses
  /// to overwrite an existing file. The copy is written beside `path` and
  /// linked into place when complete: a failed or killed export leaves no
  /// file at `path`.
  llvm::Error exportTo(const std::string &path);
  /// Merges another store file into this one in one transaction: kernels that
  /// `options` accepts added by key (an existing key is kept: the key is the
  /// identity), timings appended unless an identical row exists, winners and
  /// failures replaced only by newer ones. The other file is opened read-only
  /// and validated first: every column's type and range, text and binaries no
  /// longer than the limits above, every kernel's hash. A corrupt, foreign or
  /// newer file, or one that fails a check, is an error naming the row and
  /// column, and leaves this store untouched. Returns the rows written.
  llvm::Expected<int64_t> importFrom(const std::string &path,
                                     const ImportOptions &options = ImportOptions(),
                                     ImportReport *report = nullptr);

  /// The whole store as the bytes of the file exportTo writes (one file,
  /// rollback journal), made in memory: for sending, with nothing written
  /// to disk.
  llvm::Expected<std::string> exportImage();
  /// importFrom, reading the other store from `image`, the bytes of a store
  /// file (exportImage's or exportTo's), in memory; `name` stands for it in
  /// errors.
  llvm::Expected<int64_t> importImage(const std::string &image, const std::string &name,
                                      const ImportOptions &options = ImportOptions(),
                                      ImportReport *report = nullptr);
  /// Writes `image` (exportImage's bytes) to a new file at `path` as
  /// exportTo writes its copy: refused if `path` exists, whole or not at
  /// all. `image` must hold a tilejit store.
  static llvm::Error writeImage(const std::string &image, const std::string &path);

private:
  class Statement;

  Store(std::string path, detail::SqlitePtr db);
  llvm::Error configure();
  llvm::Error migrate();
  /// The cached prepared statement for `sql` (prepared on first use; reset and
  /// cleared when the returned object goes away). Callers hold mu_.
  llvm::Expected<Statement> statement(const char *sql);
  /// A winners row of `SELECT tune_key, config, kernel_key, median_ms,
  /// reason, chosen_at`.
  static Winner winnerOf(Statement &st);
  /// Whether the cached query `sql` (SELECT EXISTS with ?1, ?2) holds.
  llvm::Expected<bool> exists(const char *sql, const std::string &tuneKey,
                              const std::string &config);
  /// Runs one cached statement to completion.
  llvm::Error exec(const char *sql);
  /// Runs `body` inside BEGIN IMMEDIATE ... COMMIT (ROLLBACK when it fails).
  template <typename Body> llvm::Error write(Body &&body);
  /// Runs `body` inside BEGIN ... COMMIT: one snapshot for several reads.
  template <typename Body> llvm::Error read(Body &&body);
  llvm::Error error(const llvm::Twine &what, int rc) const;
  llvm::Error deleteIfCorrupt(const std::string &key, bool &deleted, std::string &detail);
  /// importFrom and importImage once the other store is open as `src`.
  llvm::Expected<int64_t> importSource(sqlite3 *src, const std::string &srcPath,
                                       const ImportOptions &options, ImportReport &rep);
  /// Copies the kernels at `kernelRows` (rowids) and every other row.
  llvm::Expected<int64_t> importRows(sqlite3 *src, const std::string &srcPath,
                                     const std::vector<int64_t> &kernelRows);
  /// Creates a fresh store at `path` through a temporary file beside it.
  static llvm::Error createAtomically(const std::string &path, int busyTimeoutMs,
                                      JournalMode journal);

  std::string path_;
  int schemaVersion_ = 0;
  int busyTimeoutMs_ = kDefaultBusyTimeoutMs;
  JournalMode journal_ = JournalMode::Auto;
  std::string journalMode_;
  bool readOnly_ = false;
  std::string notice_; // what configure() has to say (the journal mode it followed)
  mutable std::mutex mu_;
  std::atomic<uint64_t> commits_{0};
  detail::SqlitePtr db_; // declared before stmts_, so statements are finalized first
  std::unordered_map<std::string, detail::SqliteStmtPtr> stmts_;
};

} // namespace tilejit
