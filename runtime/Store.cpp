//===- Store.cpp - the SQLite tuning store ----------------------------------===//
#include "runtime/Store.h"

#include "core/Settings.h"

#include "core/Sha256.h"

#include <sqlite3.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <thread>
#include <unistd.h>

#include "llvm/ADT/StringExtras.h"

namespace tilejit {

namespace fs = std::filesystem;

void detail::SqliteClose::operator()(sqlite3 *db) const { sqlite3_close_v2(db); }
void detail::SqliteFinalize::operator()(sqlite3_stmt *s) const { sqlite3_finalize(s); }

namespace {

/// "TJIT": marks the file as ours, so another application's database with a
/// user_version of its own is not mistaken for a tilejit store.
constexpr int32_t kApplicationId = 0x544a4954;

/// Schema steps: kMigrations[i] takes a store from version i to i + 1. Append
/// new steps; never edit one that has shipped (stores in the field ran it).
/// Large columns (ptx, cubin) come last in their row so that reading the small
/// ones does not walk the blob's overflow pages.
const char *const kMigrations[] = {
    // 0 -> 1
    R"sql(
CREATE TABLE kernels (
  key TEXT PRIMARY KEY NOT NULL,
  spec TEXT NOT NULL,
  config TEXT NOT NULL,
  arch TEXT NOT NULL,
  toolchain TEXT NOT NULL,
  launch TEXT NOT NULL,
  workspace_bytes INTEGER NOT NULL,
  sha256 TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  ptx TEXT NOT NULL,
  cubin BLOB NOT NULL
);
CREATE TABLE timings (
  id INTEGER PRIMARY KEY,
  tune_key TEXT NOT NULL,
  config TEXT NOT NULL,
  median_ms REAL NOT NULL,
  p20_ms REAL NOT NULL,
  p80_ms REAL NOT NULL,
  reps INTEGER NOT NULL,
  gpu TEXT NOT NULL,
  sm_count INTEGER NOT NULL,
  driver_version INTEGER NOT NULL,
  sm_clock_mhz INTEGER NOT NULL,
  mem_clock_mhz INTEGER NOT NULL,
  created_at INTEGER NOT NULL
);
CREATE INDEX timings_by_tune_key ON timings (tune_key, config);
CREATE TABLE winners (
  tune_key TEXT PRIMARY KEY NOT NULL,
  config TEXT NOT NULL,
  kernel_key TEXT REFERENCES kernels (key) ON DELETE SET NULL,
  median_ms REAL NOT NULL,
  reason TEXT NOT NULL,
  chosen_at INTEGER NOT NULL
);
CREATE INDEX winners_by_kernel ON winners (kernel_key);
CREATE TABLE failures (
  tune_key TEXT NOT NULL,
  config TEXT NOT NULL,
  stage TEXT NOT NULL CHECK (stage IN ('compile', 'launch', 'verify')),
  reason TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  PRIMARY KEY (tune_key, config)
);
)sql",
};
constexpr int kSchemaVersion = sizeof(kMigrations) / sizeof(kMigrations[0]);
const char *const kTables[] = {"kernels", "timings", "winners", "failures"};

llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

/// An import refused for what its source holds (isImportRejection).
llvm::Error rejected(const llvm::Twine &msg) {
  return llvm::createStringError(std::make_error_code(std::errc::invalid_argument), msg);
}

int64_t now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string sha256Hex(const void *data, size_t size) {
  return tilejit::sha256Hex(std::string_view(static_cast<const char *>(data), size));
}

bool isKernelKey(const std::string &key) {
  if (key.size() != 64)
    return false;
  for (char c : key)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
      return false;
  return true;
}

/// The start of a statement, enough to tell which one failed.
std::string shortSql(const char *sql) {
  std::string s = sql ? sql : "";
  return s.size() > 48 ? s.substr(0, 45) + "..." : s;
}

/// Puts `what` after the store's name in an error that came from deeper down:
/// "tilejit store P: what: detail".
llvm::Error withContext(llvm::Error e, const std::string &path, const llvm::Twine &what) {
  std::string msg = toString(std::move(e));
  std::string prefix = "tilejit store " + path + ": ";
  if (msg.compare(0, prefix.size(), prefix) == 0)
    msg.erase(0, prefix.size());
  return fail(prefix + what + ": " + msg);
}

/// sqlite3_errmsg and sqlite3_errstr, once when they say the same thing.
std::string sqliteMessage(sqlite3 *db, int rc) {
  std::string msg = db ? sqlite3_errmsg(db) : "";
  std::string str = sqlite3_errstr(rc);
  if (msg.empty() || msg == str)
    return str;
  return msg + " (" + str + ")";
}

/// True for the result codes that mean the file's content is bad, as opposed
/// to a lock, a permission or an I/O failure (which must never get a store
/// moved aside).
bool isCorruption(int rc) {
  int primary = rc & 0xff;
  return primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB;
}

/// What the first 100 bytes of a file say, read without SQLite.
struct FileHeader {
  bool exists = false;
  uint64_t size = 0;
  dev_t dev = 0;
  ino_t ino = 0;
  bool sqlite = false;
  uint32_t userVersion = 0;
  uint32_t applicationId = 0;
};

uint32_t bigEndian32(const unsigned char *p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

/// Why a file of mode `mode` cannot be a store, or "" for a regular file.
std::string notRegular(mode_t mode) {
  if (S_ISREG(mode))
    return "";
  if (S_ISDIR(mode))
    return "is a directory, not a store file";
  if (S_ISFIFO(mode))
    return "is a FIFO, not a regular file";
  if (S_ISSOCK(mode))
    return "is a socket, not a regular file";
  return "is a device, not a regular file";
}

llvm::Expected<FileHeader> readHeader(const std::string &path) {
  FileHeader h;
  // The type first: open() of a FIFO waits for a writer forever.
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT)
      return h;
    return fail("tilejit store " + path + ": cannot read it: " + std::strerror(errno));
  }
  if (std::string why = notRegular(st.st_mode); !why.empty())
    return fail("tilejit store " + path + " " + why);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT)
      return h;
    return fail("tilejit store " + path + ": cannot read it: " + std::strerror(errno));
  }
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return fail("tilejit store " + path + ": cannot stat it: " + std::strerror(err));
  }
  if (std::string why = notRegular(st.st_mode); !why.empty()) {
    ::close(fd);
    return fail("tilejit store " + path + " " + why);
  }
  h.exists = true;
  h.size = uint64_t(st.st_size);
  h.dev = st.st_dev;
  h.ino = st.st_ino;
  unsigned char buf[100];
  ssize_t n = ::pread(fd, buf, sizeof(buf), 0);
  ::close(fd);
  if (n == ssize_t(sizeof(buf)) && std::memcmp(buf, "SQLite format 3\0", 16) == 0) {
    h.sqlite = true;
    h.userVersion = bigEndian32(buf + 60);
    h.applicationId = bigEndian32(buf + 68);
  }
  return h;
}

/// A file is moved aside when this is non-empty: why it cannot be our store.
struct Inspection {
  detail::SqlitePtr db;
  FileHeader header;
  std::string setAside;
};

/// Runs a one-column query and returns its rows as text; `rc` gets the failing
/// result code (SQLITE_OK when it ran).
std::vector<std::string> queryColumn(sqlite3 *db, const char *sql, int &rc) {
  std::vector<std::string> rows;
  sqlite3_stmt *raw = nullptr;
  rc = sqlite3_prepare_v2(db, sql, -1, &raw, nullptr);
  detail::SqliteStmtPtr st(raw);
  if (rc != SQLITE_OK)
    return rows;
  while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
    const unsigned char *t = sqlite3_column_text(st.get(), 0);
    rows.emplace_back(t ? reinterpret_cast<const char *>(t) : "");
  }
  if (rc == SQLITE_DONE)
    rc = SQLITE_OK;
  return rows;
}

std::string joined(const std::vector<std::string> &rows, size_t limit) {
  std::string s;
  for (size_t i = 0; i < rows.size() && i < limit; ++i)
    s += (i ? "; " : "") + rows[i];
  if (rows.size() > limit)
    s += "; and " + std::to_string(rows.size() - limit) + " more";
  return s;
}

llvm::Error newer(const std::string &path, uint32_t v) {
  return fail("tilejit store " + path + ": schema version " + llvm::Twine(v) +
              " is newer than this tilejit knows (" + llvm::Twine(kSchemaVersion) +
              "); use a newer tilejit or another store. The file was not changed.");
}

/// What the header alone tells: a store of a newer schema is refused before
/// SQLite opens it.
llvm::Error checkNotNewer(const FileHeader &h, const std::string &path) {
  bool oursOrBlank = h.applicationId == 0 || h.applicationId == uint32_t(kApplicationId);
  if (h.sqlite && oursOrBlank && h.userVersion > uint32_t(kSchemaVersion))
    return newer(path, h.userVersion);
  return llvm::Error::success();
}

/// The checks of inspect() once `in.db` is open: a SQLite database that
/// passes quick_check, is ours (or empty) and not newer than this build. An
/// error, or `in.setAside` set.
llvm::Error examine(Inspection &in, const std::string &path) {
  sqlite3 *db = in.db.get();
  const FileHeader &h = in.header;
  int rc = SQLITE_OK;
  sqlite3_extended_result_codes(db, 1);
  // Until the file is known to be good, closing must not checkpoint a WAL
  // into it: a file set aside or refused stays as it was found.
  sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr);
  // Every question below is asked of one snapshot: read one by one, another
  // process's migration could commit between user_version (still 0) and the
  // table list (now ours), and a healthy new store would look foreign. An
  // early return closes the connection, which ends the transaction.
  rc = sqlite3_exec(db, "BEGIN", nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK)
    return fail("tilejit store " + path + ": cannot read it: " + sqliteMessage(db, rc));

  auto check = queryColumn(db, "PRAGMA quick_check", rc);
  if (rc != SQLITE_OK) {
    // SQLite's verdict, reached under its file locks, decides: a header read
    // above may race with another process creating the file. The header only
    // words the message.
    if (isCorruption(rc)) {
      if (h.exists && h.size > 0 && h.size < 100)
        in.setAside = "is " + std::to_string(h.size) + " bytes, too short for a SQLite database";
      else if (h.exists && h.size > 0 && !h.sqlite)
        in.setAside = "is not a SQLite database";
      else
        in.setAside = "is not a usable SQLite database (" + sqliteMessage(db, rc) + ")";
      return llvm::Error::success();
    }
    return fail("tilejit store " + path + ": cannot check it: " + sqliteMessage(db, rc));
  }
  if (check.size() != 1 || check[0] != "ok") {
    in.setAside = "fails PRAGMA quick_check (" + joined(check, 3) + ")";
    return llvm::Error::success();
  }

  auto pragmaInt = [&](const char *sql) -> llvm::Expected<int64_t> {
    auto rows = queryColumn(db, sql, rc);
    if (rc != SQLITE_OK || rows.size() != 1)
      return fail("tilejit store " + path + ": " + sql + ": " + sqliteMessage(db, rc));
    return std::strtoll(rows[0].c_str(), nullptr, 10);
  };
  auto appId = pragmaInt("PRAGMA application_id");
  if (!appId)
    return appId.takeError();
  auto version = pragmaInt("PRAGMA user_version");
  if (!version)
    return version.takeError();
  auto tables = queryColumn(db,
                            "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') "
                            "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name",
                            rc);
  if (rc != SQLITE_OK)
    return fail("tilejit store " + path + ": cannot read its schema: " + sqliteMessage(db, rc));

  if (*appId != 0 && *appId != kApplicationId) {
    in.setAside =
        "belongs to another application (application_id " + llvm::utohexstr(uint32_t(*appId)) + ")";
    return llvm::Error::success();
  }
  if (*version > kSchemaVersion)
    return newer(path, uint32_t(*version));
  if (*version == 0 && !tables.empty()) {
    in.setAside = "is a SQLite database of another application (tables " + joined(tables, 5) +
                  ") with no tilejit schema";
    return llvm::Error::success();
  }
  if (*version > 0) {
    std::vector<std::string> missing;
    for (const char *t : kTables)
      if (std::find(tables.begin(), tables.end(), t) == tables.end())
        missing.push_back(t);
    if (!missing.empty()) {
      in.setAside = "has schema version " + std::to_string(*version) +
                    " but lacks the tilejit tables " + joined(missing, 4);
      return llvm::Error::success();
    }
  }
  rc = sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK)
    return fail("tilejit store " + path + ": cannot read it: " + sqliteMessage(db, rc));
  return llvm::Error::success();
}

/// Checks what a database file is before anything is written to it: a SQLite
/// file that passes quick_check, is ours (or empty) and not newer than this
/// build. `readOnly` opens it for import.
llvm::Expected<Inspection> inspect(const std::string &path, bool readOnly, int busyMs) {
  Inspection in;
  if (path != ":memory:") {
    auto header = readHeader(path);
    if (!header)
      return header.takeError();
    in.header = *header;
  }
  const FileHeader &h = in.header;
  if (readOnly && !h.exists)
    return fail("tilejit store " + path + ": no such file");
  if (auto e = checkNotNewer(h, path))
    return e;

  sqlite3 *raw = nullptr;
  int flags = (readOnly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) |
              SQLITE_OPEN_NOMUTEX;
  int rc = sqlite3_open_v2(path.c_str(), &raw, flags, nullptr);
  in.db.reset(raw);
  if (rc != SQLITE_OK)
    return fail("tilejit store " + path + ": cannot open it: " + sqliteMessage(raw, rc));
  sqlite3_busy_timeout(raw, busyMs);
  if (auto e = examine(in, path))
    return e;
  return in;
}

/// An import's source held in memory: `image` is the bytes of a store file.
/// Nothing is written anywhere; the copy is read-only.
llvm::Expected<Inspection> inspectImage(const std::string &image, const std::string &name) {
  Inspection in;
  FileHeader &h = in.header;
  h.exists = true;
  h.size = image.size();
  const auto *bytes = reinterpret_cast<const unsigned char *>(image.data());
  if (image.size() >= 100 && std::memcmp(bytes, "SQLite format 3\0", 16) == 0) {
    h.sqlite = true;
    h.userVersion = bigEndian32(bytes + 60);
    h.applicationId = bigEndian32(bytes + 68);
  }
  if (auto e = checkNotNewer(h, name))
    return e;
  sqlite3 *raw = nullptr;
  int rc = sqlite3_open_v2(
      ":memory:", &raw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  in.db.reset(raw);
  if (rc != SQLITE_OK)
    return fail("tilejit store " + name + ": cannot open it: " + sqliteMessage(raw, rc));
  auto *copy = static_cast<unsigned char *>(sqlite3_malloc64(std::max<size_t>(image.size(), 1)));
  if (!copy)
    return fail("tilejit store " + name + ": no memory for its " + llvm::Twine(image.size()) +
                " bytes");
  std::memcpy(copy, image.data(), image.size());
  // A store kept in WAL mode says so in bytes 18 and 19; a copy in memory
  // has no WAL beside it (and memory databases cannot have one), so it is
  // read as the rollback-journal file that the main file alone is.
  if (image.size() >= 100 && h.sqlite)
    copy[18] = copy[19] = 1;
  rc = sqlite3_deserialize(raw, "main", copy, sqlite3_int64(image.size()),
                           sqlite3_int64(image.size()),
                           SQLITE_DESERIALIZE_FREEONCLOSE | SQLITE_DESERIALIZE_READONLY);
  if (rc != SQLITE_OK)
    return fail("tilejit store " + name + ": cannot read it: " + sqliteMessage(raw, rc));
  if (auto e = examine(in, name))
    return e;
  return in;
}

/// Renames `path` and its side files to "<path>.corrupt-<unixtime>[.N]". Does
/// nothing (and says so in `moved`) when another process replaced the file
/// since `seen` was read: it has already dealt with it.
llvm::Error moveAside(const std::string &path, const FileHeader &seen, const std::string &why,
                      std::string *notice, bool &moved) {
  moved = false;
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || st.st_dev != seen.dev || st.st_ino != seen.ino)
    return llvm::Error::success();
  std::string base = path + ".corrupt-" + std::to_string(now());
  std::string aside = base;
  std::error_code ec;
  for (int i = 1; fs::exists(aside, ec) || fs::exists(aside + "-wal", ec); ++i)
    aside = base + "." + std::to_string(i);
  if (::rename(path.c_str(), aside.c_str()) != 0)
    return fail("tilejit store " + path + " " + why + ", and moving it aside to " + aside +
                " failed: " + std::strerror(errno));
  for (const char *suffix : {"-wal", "-shm", "-journal"}) {
    std::string side = path + suffix;
    if (fs::exists(side, ec) && ::rename(side.c_str(), (aside + suffix).c_str()) != 0)
      return fail("tilejit store " + path + ": moved it aside to " + aside + " but not " + side +
                  ": " + std::strerror(errno));
  }
  moved = true;
  if (notice)
    *notice =
        "store " + path + " " + why + "; moved it aside to " + aside + " and created a fresh store";
  return llvm::Error::success();
}

} // namespace

bool isCubinFor(const std::vector<char> &cubin, const std::string &arch, std::string &problem) {
  auto le = [&](size_t at, size_t n) {
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i)
      v |= uint64_t(uint8_t(cubin[at + i])) << (8 * i);
    return v;
  };
  static const char kElfMagic[4] = {0x7f, 'E', 'L', 'F'};
  if (cubin.size() < 64 || std::memcmp(cubin.data(), kElfMagic, 4) != 0) {
    problem = "is not an ELF file";
    return false;
  }
  if (cubin[4] != 2 || cubin[5] != 1) {
    problem = "is not a 64-bit little-endian ELF file";
    return false;
  }
  constexpr uint64_t kEmCuda = 190;
  if (uint64_t machine = le(18, 2); machine != kEmCuda) {
    problem = "is an ELF file for machine " + std::to_string(machine) +
              ", not a CUDA binary (EM_CUDA, 190)";
    return false;
  }
  int want = -1;
  if (arch.rfind("sm_", 0) == 0) {
    size_t i = 3;
    want = 0;
    for (; i < arch.size() && arch[i] >= '0' && arch[i] <= '9' && want < 10000; ++i)
      want = want * 10 + (arch[i] - '0');
    if (i == 3)
      want = -1;
  }
  if (want < 0) {
    problem = "belongs to arch '" + arch + "', which is not sm_<number>";
    return false;
  }
  // e_flags holds the SM: bits 8-15 from ELF ABI version 8 (CUDA 12.8) on,
  // bits 0-7 before.
  uint64_t flags = le(48, 4);
  int sm = uint8_t(cubin[8]) >= 8 ? int((flags >> 8) & 0xff) : int(flags & 0xff);
  if (sm != want) {
    problem = "is a cubin for sm_" + std::to_string(sm) + ", not for " + arch;
    return false;
  }
  return true;
}

//===----------------------------------------------------------------------===//
// Statements and transactions
//===----------------------------------------------------------------------===//

/// A cached statement in use: bindings, steps, columns; reset and cleared when
/// it goes away, so the next user finds it fresh.
class Store::Statement {
public:
  Statement(const Store &store, sqlite3_stmt *st) : store_(&store), st_(st) {}
  Statement(Statement &&o) : store_(o.store_), st_(o.st_), bindRc_(o.bindRc_) { o.st_ = nullptr; }
  Statement &operator=(Statement &&) = delete;
  ~Statement() {
    if (st_) {
      sqlite3_reset(st_);
      sqlite3_clear_bindings(st_);
    }
  }

  Statement &bind(int i, const std::string &v) {
    return check(sqlite3_bind_text64(st_, i, v.data(), v.size(), SQLITE_TRANSIENT, SQLITE_UTF8));
  }
  Statement &bind(int i, const char *v) { return bind(i, std::string(v)); }
  Statement &bind(int i, int64_t v) { return check(sqlite3_bind_int64(st_, i, v)); }
  Statement &bind(int i, int v) { return check(sqlite3_bind_int64(st_, i, v)); }
  Statement &bind(int i, double v) { return check(sqlite3_bind_double(st_, i, v)); }
  /// The bytes must outlive the statement's steps (no copy: cubins are large).
  Statement &bindBlob(int i, const std::vector<char> &v) {
    if (v.empty())
      return check(sqlite3_bind_zeroblob(st_, i, 0));
    return check(sqlite3_bind_blob64(st_, i, v.data(), v.size(), SQLITE_STATIC));
  }
  /// Text, or NULL when empty.
  Statement &bindOrNull(int i, const std::string &v) {
    return v.empty() ? check(sqlite3_bind_null(st_, i)) : bind(i, v);
  }

  /// Every remaining row, each turned into a T by `read(*this)`.
  template <class T, class F> llvm::Expected<std::vector<T>> collect(F read) {
    std::vector<T> out;
    while (true) {
      auto row = step();
      if (!row)
        return row.takeError();
      if (!*row)
        return out;
      out.push_back(read(*this));
    }
  }

  /// True on a row, false when done.
  llvm::Expected<bool> step() {
    if (bindRc_ != SQLITE_OK)
      return store_->error("binding " + shortSql(sqlite3_sql(st_)), bindRc_);
    int rc = sqlite3_step(st_);
    if (rc == SQLITE_ROW)
      return true;
    if (rc == SQLITE_DONE)
      return false;
    return store_->error(shortSql(sqlite3_sql(st_)), rc);
  }
  /// Steps a statement that returns no rows.
  llvm::Error run() {
    auto row = step();
    if (!row)
      return row.takeError();
    return llvm::Error::success();
  }

  std::string text(int i) const {
    const unsigned char *t = sqlite3_column_text(st_, i);
    return t ? std::string(reinterpret_cast<const char *>(t), sqlite3_column_bytes(st_, i))
             : std::string();
  }
  std::vector<char> blob(int i) const {
    const char *b = static_cast<const char *>(sqlite3_column_blob(st_, i));
    return b ? std::vector<char>(b, b + sqlite3_column_bytes(st_, i)) : std::vector<char>();
  }
  int64_t int64(int i) const { return sqlite3_column_int64(st_, i); }
  int int32(int i) const { return int(sqlite3_column_int64(st_, i)); }
  double real(int i) const { return sqlite3_column_double(st_, i); }

private:
  Statement &check(int rc) {
    if (rc != SQLITE_OK && bindRc_ == SQLITE_OK)
      bindRc_ = rc;
    return *this;
  }
  const Store *store_;
  sqlite3_stmt *st_;
  int bindRc_ = SQLITE_OK;
};

llvm::Error Store::error(const llvm::Twine &what, int rc) const {
  return fail("tilejit store " + path_ + ": " + what + ": " + sqliteMessage(db_.get(), rc));
}

llvm::Expected<Store::Statement> Store::statement(const char *sql) {
  auto &slot = stmts_[sql];
  if (!slot) {
    sqlite3_stmt *raw = nullptr;
    int rc = sqlite3_prepare_v3(db_.get(), sql, -1, SQLITE_PREPARE_PERSISTENT, &raw, nullptr);
    slot.reset(raw);
    if (rc != SQLITE_OK) {
      slot.reset();
      return error("preparing " + shortSql(sql), rc);
    }
  }
  return Statement(*this, slot.get());
}

llvm::Error Store::exec(const char *sql) {
  auto st = statement(sql);
  if (!st)
    return st.takeError();
  while (true) {
    auto row = st->step();
    if (!row)
      return row.takeError();
    if (!*row)
      return llvm::Error::success();
  }
}

template <typename Body> llvm::Error Store::write(Body &&body) {
  // IMMEDIATE takes the write lock up front (waiting through the busy
  // timeout), so a transaction never fails half-way on a lock upgrade.
  if (auto e = exec("BEGIN IMMEDIATE"))
    return e;
  llvm::Error e = body();
  if (!e)
    e = exec("COMMIT");
  if (e && !sqlite3_get_autocommit(db_.get()))
    llvm::consumeError(exec("ROLLBACK"));
  if (!e)
    commits_.fetch_add(1, std::memory_order_acq_rel);
  return e;
}

template <typename Body> llvm::Error Store::read(Body &&body) {
  if (auto e = exec("BEGIN"))
    return e;
  llvm::Error e = body();
  llvm::Error end = exec(e ? "ROLLBACK" : "COMMIT");
  if (e) {
    llvm::consumeError(std::move(end));
    return e;
  }
  return end;
}

//===----------------------------------------------------------------------===//
// Opening
//===----------------------------------------------------------------------===//

int Store::knownSchemaVersion() { return kSchemaVersion; }

Store::Store(std::string path, detail::SqlitePtr db) : path_(std::move(path)), db_(std::move(db)) {}

Store::~Store() = default;

void Store::setBusyTimeout(int milliseconds) {
  std::lock_guard<std::mutex> lock(mu_);
  busyTimeoutMs_ = milliseconds;
  sqlite3_busy_timeout(db_.get(), milliseconds);
}

FileSystemInfo fileSystemOf(const std::string &path) {
  // No exceptions: the working directory may be gone, the path too long.
  std::error_code ec;
  fs::path p = fs::absolute(fs::path(path), ec);
  if (ec)
    p = fs::path(path);
  while (!p.empty() && !fs::exists(p, ec) && p != p.root_path())
    p = p.parent_path();
  struct statfs st;
  if (::statfs(p.c_str(), &st) != 0)
    return {"unknown", false};
  // Magic numbers from linux/magic.h and the file systems' own sources.
  struct Known {
    uint64_t magic;
    const char *name;
    bool network;
  };
  static const Known known[] = {
      {0x6969, "nfs", true},        {0xFF534D42, "cifs", true},   {0xFE534D42, "smb2", true},
      {0x517B, "smb", true},        {0x0BD00BD0, "lustre", true}, {0x47504653, "gpfs", true},
      {0x00C36400, "ceph", true},   {0x19830326, "beegfs", true}, {0x01021997, "9p", true},
      {0x6B414653, "afs", true},    {0x5346414F, "afs", true},    {0x73757245, "coda", true},
      {0x7461636F, "ocfs2", true},  {0x01161970, "gfs2", true},   {0xAAD7AAEA, "panfs", true},
      {0x65735546, "fuse", true},   {0xEF53, "ext4", false},      {0x58465342, "xfs", false},
      {0x9123683E, "btrfs", false}, {0x01021994, "tmpfs", false}, {0x794C7630, "overlay", false},
      {0x2FC12FC1, "zfs", false},
  };
  uint64_t magic = uint64_t(uint32_t(st.f_type));
  for (const Known &k : known)
    if (k.magic == magic) // FUSE may be local, but sshfs, s3fs and many others are not
      return {k.name, k.network};
  char hex[32];
  std::snprintf(hex, sizeof hex, "0x%llx", (unsigned long long)magic);
  return {std::string("local (type ") + hex + ")", false};
}

namespace {

/// A name that ends in '/' names a directory, never a store file.
llvm::Error checkStorePath(const std::string &path) {
  if (path.empty())
    return fail("tilejit store: empty path");
  if (path.back() == '/')
    return fail("tilejit store " + path + ": names a directory; give a file name");
  return llvm::Error::success();
}

/// The directories between `dir` and its nearest existing ancestor, made;
/// `made` lists them, deepest last, so that a failure can remove them again.
llvm::Error makeDirectories(const fs::path &dir, const std::string &path,
                            std::vector<fs::path> &made) {
  std::error_code ec;
  std::vector<fs::path> missing;
  for (fs::path p = dir; !p.empty() && !fs::exists(p, ec); p = p.parent_path()) {
    if (ec)
      break;
    missing.push_back(p);
    if (p == p.parent_path())
      break;
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    bool created = fs::create_directory(*it, ec);
    if (ec)
      return fail("tilejit store " + path + ": cannot create its directory " + it->string() + ": " +
                  ec.message());
    if (created) // not when another process made it meanwhile
      made.push_back(*it);
  }
  if (!fs::is_directory(dir, ec))
    return fail("tilejit store " + path + ": " + dir.string() + " is not a directory" +
                (ec ? ": " + ec.message() : std::string()));
  return llvm::Error::success();
}

void removeDirectories(const std::vector<fs::path> &made) {
  std::error_code ec;
  for (auto it = made.rbegin(); it != made.rend(); ++it)
    fs::remove(*it, ec); // only while empty
}

/// A name beside `path` for a file that becomes `path` when complete.
std::string temporaryBeside(const std::string &path, const char *what) {
  static std::atomic<unsigned> counter{0};
  return path + "." + what + "-" + std::to_string(::getpid()) + "-" +
         std::to_string(counter.fetch_add(1)) + "-" + std::to_string(now());
}

void removeWithSideFiles(const std::string &path) {
  if (path.empty())
    return;
  for (const char *suffix : {"", "-wal", "-shm", "-journal"})
    ::unlink((path + suffix).c_str());
}

/// Gives `temp` the name `path` unless a file of that name exists (another
/// process made it first: EEXIST). `temp` is removed in every case.
int linkIntoPlace(const std::string &temp, const std::string &path) {
  int rc = ::link(temp.c_str(), path.c_str());
  int err = rc == 0 ? 0 : errno;
  if (rc != 0 && err != EEXIST) {
    // File systems without hard links: a rename that will not replace.
    rc = ::renameat2(AT_FDCWD, temp.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE);
    err = rc == 0 ? 0 : errno;
  }
  removeWithSideFiles(temp);
  return err;
}

} // namespace

llvm::Error Store::createAtomically(const std::string &path, int busyTimeoutMs,
                                    JournalMode journal) {
  std::string temp = temporaryBeside(path, "new");
  llvm::Error e = [&]() -> llvm::Error {
    sqlite3 *raw = nullptr;
    int rc =
        sqlite3_open_v2(temp.c_str(), &raw,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
    detail::SqlitePtr db(raw);
    if (rc != SQLITE_OK)
      return fail("tilejit store " + path + ": cannot create it: " + sqliteMessage(raw, rc));
    sqlite3_extended_result_codes(raw, 1);
    std::unique_ptr<Store> fresh(new Store(temp, std::move(db)));
    fresh->busyTimeoutMs_ = busyTimeoutMs;
    fresh->journal_ = journal;
    if (auto e = fresh->configure()) {
      std::string msg = toString(std::move(e));
      std::string prefix = "tilejit store " + temp + ": ";
      if (msg.compare(0, prefix.size(), prefix) == 0)
        msg.erase(0, prefix.size());
      return fail("tilejit store " + path + ": cannot create it: " + msg);
    }
    return llvm::Error::success();
  }();
  if (e) {
    removeWithSideFiles(temp);
    return e;
  }
  // Closed above: a WAL store has been checkpointed into the one file.
  int err = linkIntoPlace(temp, path);
  if (err != 0 && err != EEXIST)
    return fail("tilejit store " + path + ": cannot create it: " + std::strerror(err));
  return llvm::Error::success();
}

llvm::Expected<std::unique_ptr<Store>> Store::open(const std::string &path, std::string *notice,
                                                   int busyTimeoutMs, JournalMode journal) {
  if (notice)
    notice->clear();
  if (auto e = checkStorePath(path))
    return e;
  bool memory = path == ":memory:";
  std::vector<fs::path> madeDirs;
  if (!memory) {
    fs::path parent = fs::path(path).parent_path();
    if (!parent.empty())
      if (auto e = makeDirectories(parent, path, madeDirs))
        return e;
  }
  auto opened = [&]() -> llvm::Expected<std::unique_ptr<Store>> {
    // Another process may set the same bad file aside at the same time; a few
    // rounds let this one find the fresh store that the other made.
    for (int round = 0;; ++round) {
      if (!memory) {
        auto header = readHeader(path);
        if (!header)
          return header.takeError();
        if (!header->exists)
          if (auto e = createAtomically(path, busyTimeoutMs, journal))
            return e;
      }
      auto in = inspect(path, /*readOnly=*/false, busyTimeoutMs);
      if (!in)
        return in.takeError();
      if (in->setAside.empty()) {
        sqlite3_db_config(in->db.get(), SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 0, nullptr);
        std::unique_ptr<Store> store(new Store(path, std::move(in->db)));
        store->busyTimeoutMs_ = busyTimeoutMs;
        store->journal_ = journal;
        if (auto e = store->configure())
          return e;
        if (notice && !store->notice_.empty())
          *notice = notice->empty() ? store->notice_ : *notice + "; " + store->notice_;
        return store;
      }
      if (round == 3)
        return fail("tilejit store " + path + " " + in->setAside + " even after moving it aside");
      in->db.reset();
      bool moved = false;
      if (auto e = moveAside(path, in->header, in->setAside, notice, moved))
        return e;
    }
  }();
  if (!opened)
    removeDirectories(madeDirs);
  return opened;
}

llvm::Expected<std::unique_ptr<Store>> Store::openForReading(const std::string &path) {
  if (auto e = checkStorePath(path))
    return e;
  if (path == ":memory:")
    return open(path);
  auto header = readHeader(path);
  if (!header)
    return header.takeError();
  if (!header->exists)
    return std::unique_ptr<Store>();
  auto in = inspect(path, /*readOnly=*/true, kDefaultBusyTimeoutMs);
  if (!in)
    return in.takeError();
  const char *repair = "; nothing was changed (a command that writes, such as tilejit tune or "
                       "tilejit cache import, moves it aside and starts a fresh store)";
  if (!in->setAside.empty())
    return fail("tilejit store " + path + " " + in->setAside + repair);
  int rc = SQLITE_OK;
  auto version = queryColumn(in->db.get(), "PRAGMA user_version", rc);
  if (rc != SQLITE_OK || version.size() != 1)
    return fail("tilejit store " + path +
                ": cannot read its schema version: " + sqliteMessage(in->db.get(), rc));
  int v = std::atoi(version[0].c_str());
  if (v == 0) // an empty SQLite file: a store with nothing in it yet
    return std::unique_ptr<Store>();
  if (v != kSchemaVersion)
    return fail("tilejit store " + path + ": schema version " + llvm::Twine(v) +
                " is older than this tilejit's (" + llvm::Twine(kSchemaVersion) +
                "); nothing was changed (a command that writes, such as tilejit tune, migrates "
                "it)");
  std::unique_ptr<Store> store(new Store(path, std::move(in->db)));
  store->readOnly_ = true;
  store->schemaVersion_ = v;
  auto mode = queryColumn(store->db_.get(), "PRAGMA journal_mode", rc);
  store->journalMode_ = rc == SQLITE_OK && mode.size() == 1 ? mode[0] : "";
  rc = sqlite3_exec(store->db_.get(), "PRAGMA foreign_keys = ON", nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK)
    return fail("tilejit store " + path + ": " + sqliteMessage(store->db_.get(), rc));
  return store;
}

llvm::Error Store::configure() {
  std::lock_guard<std::mutex> lock(mu_);
  std::string target = "wal";
  JournalMode journal = journal_;
  if (journal == JournalMode::Auto) {
    if (auto e = settings::check("TILEJIT_STORE_JOURNAL"))
      return fail(llvm::toString(std::move(e)));
    std::string v = settings::value("TILEJIT_STORE_JOURNAL");
    if (v == "wal")
      journal = JournalMode::Wal;
    else if (v == "delete")
      journal = JournalMode::Rollback;
  }
  bool network = path_ != ":memory:" && fileSystemOf(path_).network;
  if (journal == JournalMode::Rollback || (journal == JournalMode::Auto && network))
    target = "delete";
  // A store that exists keeps the mode it is in: processes whose settings
  // differ would otherwise take turns switching it, each waiting out the
  // others' locks. Only WAL on a network file system is not kept: its shared
  // memory does not reach the other hosts.
  {
    auto version = statement("PRAGMA user_version");
    if (!version)
      return version.takeError();
    auto row = version->step();
    if (!row)
      return row.takeError();
    bool existing = *row && version->int64(0) != 0;
    if (existing) {
      auto st = statement("PRAGMA journal_mode");
      if (!st)
        return st.takeError();
      auto cur = st->step();
      if (!cur)
        return cur.takeError();
      std::string current = *cur ? st->text(0) : "";
      if ((current == "wal" || current == "delete") && current != target &&
          !(current == "wal" && network)) {
        journalMode_ = current;
        notice_ = "store " + path_ + " is kept in " +
                  (current == "wal" ? std::string("WAL mode") : "rollback-journal mode") +
                  ", the mode it was made in (this process was set for " +
                  (target == "wal" ? "WAL" : "a rollback journal") + ")";
        target = current;
      }
    }
  }
  // Changing the journal mode upgrades a read lock to an exclusive one, and
  // SQLite does not call the busy handler for an upgrade (two upgraders would
  // deadlock): another process reading the file fails the switch at once with
  // SQLITE_BUSY. So wait here, within the busy timeout.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(busyTimeoutMs_);
  std::string mode;
  while (true) {
    std::string sql = "PRAGMA journal_mode = " + target;
    auto st = statement(sql.c_str());
    if (!st)
      return st.takeError();
    auto row = st->step();
    if (row) {
      mode = *row ? st->text(0) : "";
      break;
    }
    int rc = sqlite3_extended_errcode(db_.get());
    if ((rc & 0xff) != SQLITE_BUSY)
      return row.takeError();
    if (std::chrono::steady_clock::now() >= deadline) {
      std::string msg = toString(row.takeError());
      return fail("tilejit store " + path_ + ": cannot switch it to " +
                  (target == "wal" ? std::string("WAL mode") : "a rollback journal") +
                  ": other processes kept it open for " + llvm::Twine(busyTimeoutMs_) + " ms (" +
                  sqliteMessage(db_.get(), rc) + ")");
    }
    llvm::consumeError(row.takeError());
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (mode != target && mode != "memory") {
    if (target == "wal")
      return fail("tilejit store " + path_ + ": cannot switch to WAL mode (journal mode is '" +
                  mode +
                  "'); is the file on a file system without shared memory? Set "
                  "TILEJIT_STORE_JOURNAL=delete");
    return fail("tilejit store " + path_ + ": cannot leave '" + mode +
                "' journal mode (another process on this host has it open in WAL mode); a "
                "store on a network file system must not use WAL: close the others first");
  }
  journalMode_ = mode;
  // WAL: NORMAL loses no commit when a process crashes; only a power loss can
  // drop the last commits, which a cache can redo. A rollback journal needs
  // FULL for the same promise.
  if (auto e = exec(target == "wal" ? "PRAGMA synchronous = NORMAL" : "PRAGMA synchronous = FULL"))
    return e;
  if (auto e = exec("PRAGMA foreign_keys = ON"))
    return e;
  return migrate();
}

llvm::Error Store::migrate() {
  auto readVersion = [&]() -> llvm::Expected<int> {
    auto st = statement("PRAGMA user_version");
    if (!st)
      return st.takeError();
    auto row = st->step();
    if (!row)
      return row.takeError();
    return *row ? st->int32(0) : 0;
  };
  auto version = readVersion();
  if (!version)
    return version.takeError();
  schemaVersion_ = *version;
  if (*version == kSchemaVersion)
    return llvm::Error::success();
  if (auto e = write([&]() -> llvm::Error {
        // Another process may have migrated while this one waited for the lock.
        auto v = readVersion();
        if (!v)
          return v.takeError();
        if (*v > kSchemaVersion)
          return fail("tilejit store " + path_ + ": schema version " + llvm::Twine(*v) +
                      " is newer than this tilejit knows (" + llvm::Twine(kSchemaVersion) + ")");
        if (*v == kSchemaVersion)
          return llvm::Error::success();
        for (int from = *v; from < kSchemaVersion; ++from) {
          int rc = sqlite3_exec(db_.get(), kMigrations[from], nullptr, nullptr, nullptr);
          if (rc != SQLITE_OK)
            return error("migrating the schema from version " + llvm::Twine(from) + " to " +
                             llvm::Twine(from + 1),
                         rc);
        }
        // PRAGMA values cannot be bound; these are our own integers.
        std::string set = "PRAGMA user_version = " + std::to_string(kSchemaVersion) +
                          "; PRAGMA application_id = " + std::to_string(kApplicationId) + ";";
        int rc = sqlite3_exec(db_.get(), set.c_str(), nullptr, nullptr, nullptr);
        if (rc != SQLITE_OK)
          return error("setting the schema version", rc);
        return llvm::Error::success();
      }))
    return e;
  schemaVersion_ = kSchemaVersion;
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// Kernels
//===----------------------------------------------------------------------===//

static const char *const kPutKernel =
    "INSERT INTO kernels (key, spec, config, arch, toolchain, launch, workspace_bytes, sha256, "
    "created_at, ptx, cubin) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11) "
    "ON CONFLICT (key) DO UPDATE SET spec = excluded.spec, config = excluded.config, "
    "arch = excluded.arch, toolchain = excluded.toolchain, launch = excluded.launch, "
    "workspace_bytes = excluded.workspace_bytes, sha256 = excluded.sha256, "
    "created_at = excluded.created_at, ptx = excluded.ptx, cubin = excluded.cubin";

llvm::Error Store::putKernel(StoredKernel k) {
  if (!isKernelKey(k.key))
    return fail("tilejit store " + path_ + ": kernel key '" + k.key +
                "' is not 64 lower-case hex digits");
  k.sha256 = sha256Hex(k.cubin.data(), k.cubin.size());
  if (k.createdAt == 0)
    k.createdAt = now();
  std::lock_guard<std::mutex> lock(mu_);
  return write([&]() -> llvm::Error {
    auto st = statement(kPutKernel);
    if (!st)
      return st.takeError();
    st->bind(1, k.key).bind(2, k.spec).bind(3, k.config).bind(4, k.arch).bind(5, k.toolchain);
    st->bind(6, k.launch).bind(7, k.workspaceBytes).bind(8, k.sha256).bind(9, k.createdAt);
    st->bind(10, k.ptx).bindBlob(11, k.cubin);
    if (auto e = st->run())
      return withContext(std::move(e), path_, "storing kernel " + k.key);
    return llvm::Error::success();
  });
}

llvm::Error Store::deleteIfCorrupt(const std::string &key, bool &deleted, std::string &detail) {
  deleted = false;
  return write([&]() -> llvm::Error {
    // Look again under the write lock: another process may have replaced the
    // bad row with a good one since it was read.
    std::string stored, actual;
    {
      auto st = statement("SELECT sha256, cubin FROM kernels WHERE key = ?1");
      if (!st)
        return st.takeError();
      st->bind(1, key);
      auto row = st->step();
      if (!row)
        return row.takeError();
      if (!*row)
        return llvm::Error::success();
      stored = st->text(0);
      std::vector<char> cubin = st->blob(1);
      actual = sha256Hex(cubin.data(), cubin.size());
    }
    if (actual == stored)
      return llvm::Error::success();
    detail = "stored " + stored + ", computed " + actual;
    auto del = statement("DELETE FROM kernels WHERE key = ?1");
    if (!del)
      return del.takeError();
    del->bind(1, key);
    if (auto e = del->run())
      return e;
    deleted = true;
    return llvm::Error::success();
  });
}

llvm::Expected<std::optional<StoredKernel>> Store::getKernel(const std::string &key,
                                                             std::string *problem) {
  if (problem)
    problem->clear();
  std::lock_guard<std::mutex> lock(mu_);
  StoredKernel k;
  {
    auto st = statement("SELECT key, spec, config, arch, toolchain, launch, workspace_bytes, "
                        "sha256, created_at, ptx, cubin FROM kernels WHERE key = ?1");
    if (!st)
      return st.takeError();
    st->bind(1, key);
    auto row = st->step();
    if (!row)
      return row.takeError();
    if (!*row)
      return std::nullopt;
    k.key = st->text(0);
    k.spec = st->text(1);
    k.config = st->text(2);
    k.arch = st->text(3);
    k.toolchain = st->text(4);
    k.launch = st->text(5);
    k.workspaceBytes = st->int64(6);
    k.sha256 = st->text(7);
    k.createdAt = st->int64(8);
    k.ptx = st->text(9);
    k.cubin = st->blob(10);
  }
  std::string actual = sha256Hex(k.cubin.data(), k.cubin.size());
  if (actual == k.sha256)
    return k;
  if (readOnly_) {
    if (problem)
      *problem = "tilejit store " + path_ + ": kernel " + key +
                 " failed its SHA-256 check (stored " + k.sha256 + ", computed " + actual +
                 "); left as it is (read only): the next use that writes (tilejit tune, the "
                 "engine) deletes it";
    return std::nullopt;
  }
  bool deleted = false;
  std::string detail;
  if (auto e = deleteIfCorrupt(key, deleted, detail))
    return e;
  if (problem) {
    if (deleted)
      *problem = "tilejit store " + path_ + ": kernel " + key + " failed its SHA-256 check (" +
                 detail + "); deleted it, so it will be compiled again";
    else
      *problem = "tilejit store " + path_ + ": kernel " + key +
                 " failed its SHA-256 check; another process has replaced or removed it since";
  }
  return std::nullopt;
}

//===----------------------------------------------------------------------===//
// Timings, winners, failures
//===----------------------------------------------------------------------===//

static const char *const kInsertTiming =
    "INSERT INTO timings (tune_key, config, median_ms, p20_ms, p80_ms, reps, gpu, sm_count, "
    "driver_version, sm_clock_mhz, mem_clock_mhz, created_at) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)";

// A template so that it need not name the private Statement type.
template <typename Stmt> static void bindTiming(Stmt &st, const Timing &t, int64_t createdAt) {
  st.bind(1, t.tuneKey).bind(2, t.config).bind(3, t.medianMs).bind(4, t.p20Ms).bind(5, t.p80Ms);
  st.bind(6, t.reps).bind(7, t.gpu).bind(8, t.smCount).bind(9, t.driverVersion);
  st.bind(10, t.smClockMHz).bind(11, t.memClockMHz).bind(12, createdAt);
}

llvm::Error Store::addTiming(const Timing &t) {
  if (t.tuneKey.empty())
    return fail("tilejit store " + path_ + ": a timing needs a tuning key");
  if (!std::isfinite(t.medianMs) || !std::isfinite(t.p20Ms) || !std::isfinite(t.p80Ms))
    return fail("tilejit store " + path_ + ": timing of '" + t.config + "' for " + t.tuneKey +
                " is not a finite number");
  int64_t createdAt = t.createdAt ? t.createdAt : now();
  std::lock_guard<std::mutex> lock(mu_);
  return write([&]() -> llvm::Error {
    auto st = statement(kInsertTiming);
    if (!st)
      return st.takeError();
    bindTiming(*st, t, createdAt);
    return st->run();
  });
}

llvm::Expected<std::vector<Timing>> Store::timings(const std::string &tuneKey) {
  std::lock_guard<std::mutex> lock(mu_);
  auto st = statement("SELECT tune_key, config, median_ms, p20_ms, p80_ms, reps, gpu, sm_count, "
                      "driver_version, sm_clock_mhz, mem_clock_mhz, created_at FROM timings "
                      "WHERE tune_key = ?1 ORDER BY id");
  if (!st)
    return st.takeError();
  st->bind(1, tuneKey);
  return st->collect<Timing>([](Statement &row) {
    Timing t;
    t.tuneKey = row.text(0);
    t.config = row.text(1);
    t.medianMs = row.real(2);
    t.p20Ms = row.real(3);
    t.p80Ms = row.real(4);
    t.reps = row.int32(5);
    t.gpu = row.text(6);
    t.smCount = row.int32(7);
    t.driverVersion = row.int32(8);
    t.smClockMHz = row.int32(9);
    t.memClockMHz = row.int32(10);
    t.createdAt = row.int64(11);
    return t;
  });
}

llvm::Expected<bool> Store::exists(const char *sql, const std::string &tuneKey,
                                   const std::string &config) {
  std::lock_guard<std::mutex> lock(mu_);
  auto st = statement(sql);
  if (!st)
    return st.takeError();
  st->bind(1, tuneKey).bind(2, config);
  auto row = st->step();
  if (!row)
    return row.takeError();
  return *row && st->int64(0) != 0;
}

llvm::Expected<bool> Store::hasTiming(const std::string &tuneKey, const std::string &config) {
  return exists("SELECT EXISTS (SELECT 1 FROM timings WHERE tune_key = ?1 AND config = ?2)",
                tuneKey, config);
}

llvm::Error Store::setWinner(const Winner &w) {
  if (w.tuneKey.empty())
    return fail("tilejit store " + path_ + ": a winner needs a tuning key");
  int64_t chosenAt = w.chosenAt ? w.chosenAt : now();
  std::lock_guard<std::mutex> lock(mu_);
  return write([&]() -> llvm::Error {
    if (!w.kernelKey.empty()) {
      auto has = statement("SELECT EXISTS (SELECT 1 FROM kernels WHERE key = ?1)");
      if (!has)
        return has.takeError();
      has->bind(1, w.kernelKey);
      auto row = has->step();
      if (!row)
        return row.takeError();
      if (!*row || has->int64(0) == 0)
        return fail("tilejit store " + path_ + ": the winner for " + w.tuneKey + " names kernel " +
                    w.kernelKey + ", which is not stored; store the kernel first");
    }
    auto st = statement(
        "INSERT INTO winners (tune_key, config, kernel_key, median_ms, reason, chosen_at) "
        "VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (tune_key) DO UPDATE SET "
        "config = excluded.config, kernel_key = excluded.kernel_key, "
        "median_ms = excluded.median_ms, reason = excluded.reason, chosen_at = excluded.chosen_at");
    if (!st)
      return st.takeError();
    st->bind(1, w.tuneKey).bind(2, w.config).bindOrNull(3, w.kernelKey).bind(4, w.medianMs);
    st->bind(5, w.reason).bind(6, chosenAt);
    if (auto e = st->run())
      return withContext(std::move(e), path_, "setting the winner for " + w.tuneKey);
    return llvm::Error::success();
  });
}

Winner Store::winnerOf(Statement &st) {
  Winner w;
  w.tuneKey = st.text(0);
  w.config = st.text(1);
  w.kernelKey = st.text(2);
  w.medianMs = st.real(3);
  w.reason = st.text(4);
  w.chosenAt = st.int64(5);
  return w;
}

llvm::Expected<std::vector<Winner>> Store::winnersWithPrefix(const std::string &prefix) {
  std::lock_guard<std::mutex> lock(mu_);
  auto st = statement("SELECT tune_key, config, kernel_key, median_ms, reason, chosen_at "
                      "FROM winners WHERE substr(tune_key, 1, length(?1)) = ?1 "
                      "ORDER BY chosen_at DESC, tune_key");
  if (!st)
    return st.takeError();
  st->bind(1, prefix);
  std::vector<Winner> out;
  while (true) {
    auto row = st->step();
    if (!row)
      return row.takeError();
    if (!*row)
      break;
    out.push_back(winnerOf(*st));
  }
  return out;
}

llvm::Expected<std::optional<Winner>> Store::winner(const std::string &tuneKey) {
  std::lock_guard<std::mutex> lock(mu_);
  auto st = statement("SELECT tune_key, config, kernel_key, median_ms, reason, chosen_at "
                      "FROM winners WHERE tune_key = ?1");
  if (!st)
    return st.takeError();
  st->bind(1, tuneKey);
  auto row = st->step();
  if (!row)
    return row.takeError();
  if (!*row)
    return std::nullopt;
  return winnerOf(*st);
}

llvm::Expected<int64_t> Store::dataVersion() {
  std::lock_guard<std::mutex> lock(mu_);
  auto st = statement("PRAGMA data_version");
  if (!st)
    return st.takeError();
  auto row = st->step();
  if (!row)
    return row.takeError();
  if (!*row)
    return fail("tilejit store " + path_ + ": PRAGMA data_version returned no row");
  return st->int64(0);
}

llvm::Error Store::addFailure(const Failure &f) {
  if (f.tuneKey.empty())
    return fail("tilejit store " + path_ + ": a failure needs a tuning key");
  if (f.stage != "compile" && f.stage != "launch" && f.stage != "verify")
    return fail("tilejit store " + path_ + ": failure stage '" + f.stage +
                "' is not compile, launch or verify");
  int64_t createdAt = f.createdAt ? f.createdAt : now();
  std::lock_guard<std::mutex> lock(mu_);
  return write([&]() -> llvm::Error {
    auto st = statement("INSERT INTO failures (tune_key, config, stage, reason, created_at) "
                        "VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (tune_key, config) DO UPDATE "
                        "SET stage = excluded.stage, reason = excluded.reason, "
                        "created_at = excluded.created_at");
    if (!st)
      return st.takeError();
    st->bind(1, f.tuneKey).bind(2, f.config).bind(3, f.stage).bind(4, f.reason).bind(5, createdAt);
    return st->run();
  });
}

llvm::Expected<std::vector<Failure>> Store::failures(const std::string &tuneKey) {
  std::lock_guard<std::mutex> lock(mu_);
  auto st = statement("SELECT tune_key, config, stage, reason, created_at FROM failures "
                      "WHERE tune_key = ?1 ORDER BY config");
  if (!st)
    return st.takeError();
  st->bind(1, tuneKey);
  return st->collect<Failure>([](Statement &row) {
    Failure f;
    f.tuneKey = row.text(0);
    f.config = row.text(1);
    f.stage = row.text(2);
    f.reason = row.text(3);
    f.createdAt = row.int64(4);
    return f;
  });
}

llvm::Expected<bool> Store::isKnownBad(const std::string &tuneKey, const std::string &config) {
  return exists("SELECT EXISTS (SELECT 1 FROM failures WHERE tune_key = ?1 AND config = ?2)",
                tuneKey, config);
}

//===----------------------------------------------------------------------===//
// Maintenance: list, verify, prune, export, import
//===----------------------------------------------------------------------===//

llvm::Expected<std::vector<Store::Summary>> Store::list() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Summary> out;
  // One read transaction: kernels and winners from the same snapshot.
  if (auto e = read([&]() -> llvm::Error {
        {
          auto st = statement(
              "SELECT key, spec, config, arch, length(cubin) + length(CAST(ptx AS BLOB)), "
              "created_at FROM kernels ORDER BY created_at, key");
          if (!st)
            return st.takeError();
          while (true) {
            auto row = st->step();
            if (!row)
              return row.takeError();
            if (!*row)
              break;
            out.push_back({"kernel", st->text(0), st->text(1), st->text(2), st->text(3),
                           st->int64(4), st->int64(5)});
          }
        }
        auto st = statement("SELECT w.tune_key, coalesce(k.spec, ''), w.config, "
                            "coalesce(k.arch, ''), w.chosen_at FROM winners w "
                            "LEFT JOIN kernels k ON k.key = w.kernel_key ORDER BY w.tune_key");
        if (!st)
          return st.takeError();
        while (true) {
          auto row = st->step();
          if (!row)
            return row.takeError();
          if (!*row)
            return llvm::Error::success();
          out.push_back(
              {"winner", st->text(0), st->text(1), st->text(2), st->text(3), 0, st->int64(4)});
        }
      }))
    return e;
  return out;
}

llvm::Expected<std::vector<std::string>> Store::verify() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> problems;
  // Content errors are findings; anything else (a lock, I/O) is an error.
  auto scan = [&](const char *sql, auto onRow) -> llvm::Error {
    auto st = statement(sql);
    if (!st) {
      std::string msg = toString(st.takeError());
      problems.push_back(msg);
      return llvm::Error::success();
    }
    while (true) {
      int rc = SQLITE_OK;
      auto row = st->step();
      if (!row) {
        rc = sqlite3_extended_errcode(db_.get());
        std::string msg = toString(row.takeError());
        if (!isCorruption(rc))
          return fail(msg);
        problems.push_back(msg);
        return llvm::Error::success();
      }
      if (!*row)
        return llvm::Error::success();
      onRow(*st);
    }
  };
  if (auto e = read([&]() -> llvm::Error {
        if (auto e = scan("PRAGMA integrity_check", [&](Statement &st) {
              if (st.text(0) != "ok")
                problems.push_back("integrity_check: " + st.text(0));
            }))
          return e;
        if (auto e = scan("PRAGMA foreign_key_check", [&](Statement &st) {
              problems.push_back("foreign_key_check: a row of " + st.text(0) + " (rowid " +
                                 std::to_string(st.int64(1)) + ") names a missing row of " +
                                 st.text(2));
            }))
          return e;
        return scan(
            "SELECT key, sha256, arch, cubin FROM kernels ORDER BY key", [&](Statement &st) {
              std::vector<char> cubin = st.blob(3);
              std::string actual = sha256Hex(cubin.data(), cubin.size());
              std::string what;
              if (actual != st.text(1))
                problems.push_back("kernel " + st.text(0) + ": cubin SHA-256 mismatch (stored " +
                                   st.text(1) + ", computed " + actual + ")");
              else if (!isCubinFor(cubin, st.text(2), what))
                problems.push_back("kernel " + st.text(0) + ": its binary " + what);
            });
      }))
    return e;
  return problems;
}

llvm::Expected<int64_t> Store::pruneOlderThan(int64_t unixTime) {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t deleted = 0;
  // Winners first, so deleting their kernels has no winners left to update.
  static const char *const kDeletes[] = {
      "DELETE FROM winners WHERE chosen_at < ?1",
      "DELETE FROM failures WHERE created_at < ?1",
      "DELETE FROM timings WHERE created_at < ?1",
      "DELETE FROM kernels WHERE created_at < ?1",
  };
  if (auto e = write([&]() -> llvm::Error {
        for (const char *sql : kDeletes) {
          auto st = statement(sql);
          if (!st)
            return st.takeError();
          st->bind(1, unixTime);
          if (auto e = st->run())
            return e;
          deleted += sqlite3_changes64(db_.get());
        }
        return llvm::Error::success();
      }))
    return e;
  return deleted;
}

namespace {
/// Creates the store copy at `path`, which must not exist (its missing
/// parent directories are made): `fill` writes it under a temporary name
/// beside it, which reaches the disk and is then linked into place, so a
/// failure, a full disk or a kill midway leaves no file at `path` (that
/// would later open as an empty store) and no directory made for it.
llvm::Error createStoreCopy(const std::string &path,
                            llvm::function_ref<llvm::Error(const std::string &temp)> fill) {
  auto refuse = [](const std::string &what) { return fail("tilejit store export: " + what); };
  std::vector<fs::path> madeDirs;
  fs::path parent = fs::path(path).parent_path();
  if (!parent.empty())
    if (auto e = makeDirectories(parent, path, madeDirs))
      return e;
  auto cleanup = [&](const std::string &temp, llvm::Error e) {
    removeWithSideFiles(temp);
    removeDirectories(madeDirs);
    return e;
  };
  std::error_code ec;
  if (fs::exists(fs::symlink_status(path, ec)) ||
      (ec && ec != std::errc::no_such_file_or_directory))
    return cleanup("", refuse(path + " already exists; refusing to overwrite it"));
  std::string temp = temporaryBeside(path, "export");
  if (auto e = fill(temp))
    return cleanup(temp, std::move(e));
  // The copy's data reaches the disk before its name does.
  int fd = ::open(temp.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::fsync(fd) != 0) {
    int err = errno;
    if (fd >= 0)
      ::close(fd);
    return cleanup(temp, refuse("writing " + path + ": " + std::strerror(err)));
  }
  ::close(fd);
  int err = linkIntoPlace(temp, path);
  if (err == EEXIST)
    return cleanup(temp, refuse(path + " already exists; refusing to overwrite it"));
  if (err != 0)
    return cleanup(temp, refuse("cannot create " + path + ": " + std::strerror(err)));
  return llvm::Error::success();
}
} // namespace

llvm::Error Store::exportTo(const std::string &path) {
  if (auto e = checkStorePath(path))
    return withContext(std::move(e), path_, "exporting to " + path);
  return createStoreCopy(path, [&](const std::string &temp) -> llvm::Error {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto st = statement("VACUUM INTO ?1");
      if (!st)
        return st.takeError();
      st->bind(1, temp);
      if (auto e = st->run())
        return withContext(std::move(e), path_, "exporting to " + path);
    }
    // A file that travels should be one file: make sure it uses a rollback
    // journal (SQLite 3.40 writes VACUUM INTO copies so; not every version
    // did).
    sqlite3 *raw = nullptr;
    int rc =
        sqlite3_open_v2(temp.c_str(), &raw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr);
    detail::SqlitePtr out(raw);
    if (rc == SQLITE_OK)
      rc = sqlite3_exec(raw, "PRAGMA journal_mode = DELETE", nullptr, nullptr, nullptr);
    if (rc != SQLITE_OK)
      return fail("tilejit store export: finishing " + path + ": " + sqliteMessage(raw, rc));
    return llvm::Error::success();
  });
}

llvm::Expected<std::string> Store::exportImage() {
  sqlite3 *raw = nullptr;
  int rc = sqlite3_open_v2(
      ":memory:", &raw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  detail::SqlitePtr copy(raw);
  if (rc != SQLITE_OK)
    return fail("tilejit store export: " + sqliteMessage(raw, rc));
  {
    std::lock_guard<std::mutex> lock(mu_);
    // A backup into a memory database needs the source's page size.
    int pageRc = SQLITE_OK;
    auto pageSize = queryColumn(db_.get(), "PRAGMA page_size", pageRc);
    if (pageRc != SQLITE_OK || pageSize.size() != 1)
      return withContext(error("PRAGMA page_size", pageRc), path_, "exporting");
    std::string setPage = "PRAGMA page_size = " + std::to_string(std::atoi(pageSize[0].c_str()));
    rc = sqlite3_exec(raw, setPage.c_str(), nullptr, nullptr, nullptr);
    if (rc != SQLITE_OK)
      return fail("tilejit store export: " + sqliteMessage(raw, rc));
    sqlite3_backup *backup = sqlite3_backup_init(raw, "main", db_.get(), "main");
    if (!backup)
      return fail("tilejit store " + path_ +
                  ": exporting: " + sqliteMessage(raw, sqlite3_errcode(raw)));
    rc = sqlite3_backup_step(backup, -1);
    int finished = sqlite3_backup_finish(backup);
    if (rc != SQLITE_DONE)
      return withContext(error("backup", rc), path_, "exporting");
    if (finished != SQLITE_OK)
      return fail("tilejit store " + path_ + ": exporting: " + sqliteMessage(raw, finished));
  }
  sqlite3_int64 size = 0;
  unsigned char *bytes = sqlite3_serialize(raw, "main", &size, 0);
  if (!bytes)
    return fail("tilejit store " + path_ + ": exporting: no memory for the copy");
  std::string image(reinterpret_cast<const char *>(bytes), size_t(size));
  sqlite3_free(bytes);
  // The copy keeps the source's header, which says WAL when the store is
  // kept so (bytes 18 and 19); like exportTo's file, the image travels as
  // one file with a rollback journal.
  if (image.size() >= 100) {
    image[18] = 1;
    image[19] = 1;
  }
  return image;
}

llvm::Error Store::writeImage(const std::string &image, const std::string &path) {
  auto refuse = [](const std::string &what) { return fail("tilejit store export: " + what); };
  {
    auto in = inspectImage(image, "the copy for " + path);
    if (!in)
      return in.takeError();
    if (!in->setAside.empty())
      return refuse("the copy for " + path + " " + in->setAside);
  }
  if (auto e = checkStorePath(path))
    return e;
  return createStoreCopy(path, [&](const std::string &temp) -> llvm::Error {
    int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
      return refuse("cannot create " + path + ": " + std::strerror(errno));
    size_t done = 0;
    while (done < image.size()) {
      ssize_t n = ::write(fd, image.data() + done, image.size() - done);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0) {
        int err = n < 0 ? errno : EIO;
        ::close(fd);
        return refuse("writing " + path + ": " + std::strerror(err));
      }
      done += size_t(n);
    }
    ::close(fd);
    return llvm::Error::success();
  });
}

bool isImportRejection(const llvm::ErrorInfoBase &e) {
  return e.convertToErrorCode() == std::errc::invalid_argument;
}

ImportOptions ImportOptions::trustAll() {
  ImportOptions o;
  o.acceptKernel = [](const StoredKernel &, std::string &) { return true; };
  return o;
}

namespace {

/// What a column of an imported table must hold.
struct ColumnRule {
  const char *name;
  enum Kind { Text, Key, NullOrKey, Int, Real, Blob } kind;
  int64_t min = 0, max = 0;                 ///< Int and Real
  int64_t maxBytes = kMaxImportedTextBytes; ///< Text, Blob
};

constexpr int64_t kMaxTime = int64_t(1) << 40; // unix seconds, far beyond any real date
constexpr int64_t kMaxMs = 1'000'000'000;

struct TableRules {
  const char *table;
  std::vector<ColumnRule> columns;
};

const std::vector<TableRules> &importRules() {
  using C = ColumnRule;
  static const std::vector<TableRules> rules = {
      {"kernels",
       {{"key", C::Key},
        {"spec", C::Text},
        {"config", C::Text},
        {"arch", C::Text},
        {"toolchain", C::Text},
        {"launch", C::Text},
        {"workspace_bytes", C::Int, 0, int64_t(1) << 48},
        {"sha256", C::Key},
        {"created_at", C::Int, 0, kMaxTime},
        {"ptx", C::Text, 0, 0, kMaxImportedCodeBytes},
        {"cubin", C::Blob, 0, 0, kMaxImportedCodeBytes}}},
      {"timings",
       {{"tune_key", C::Text},
        {"config", C::Text},
        {"median_ms", C::Real, 0, kMaxMs},
        {"p20_ms", C::Real, 0, kMaxMs},
        {"p80_ms", C::Real, 0, kMaxMs},
        {"reps", C::Int, 1, 1'000'000'000},
        {"gpu", C::Text},
        {"sm_count", C::Int, 0, 1'000'000},
        {"driver_version", C::Int, 0, 1'000'000'000},
        {"sm_clock_mhz", C::Int, 0, 1'000'000},
        {"mem_clock_mhz", C::Int, 0, 1'000'000},
        {"created_at", C::Int, 0, kMaxTime}}},
      {"winners",
       {{"tune_key", C::Text},
        {"config", C::Text},
        {"kernel_key", C::NullOrKey},
        {"median_ms", C::Real, 0, kMaxMs},
        {"reason", C::Text},
        {"chosen_at", C::Int, 0, kMaxTime}}},
      {"failures",
       {{"tune_key", C::Text},
        {"config", C::Text},
        {"stage", C::Text},
        {"reason", C::Text},
        {"created_at", C::Int, 0, kMaxTime}}},
  };
  return rules;
}

/// Checks every row of every table of an import's source against
/// importRules() without reading a large value: types, lengths, ranges.
llvm::Error validateImport(sqlite3 *src, const std::string &srcPath) {
  std::string hex64;
  for (int i = 0; i < 64; ++i)
    hex64 += "[0-9a-f]";
  for (const TableRules &t : importRules()) {
    // Per column: typeof, length, the value when numeric, whether it is a key.
    std::string sql = "SELECT rowid";
    for (const ColumnRule &c : t.columns) {
      std::string n = c.name;
      sql += ", typeof(" + n + "), length(" + n + "), CASE WHEN typeof(" + n +
             ") IN ('integer', 'real') THEN " + n + " END, " + n + " GLOB '" + hex64 + "'";
    }
    sql += std::string(" FROM ") + t.table + " ORDER BY rowid";
    sqlite3_stmt *raw = nullptr;
    int rc = sqlite3_prepare_v2(src, sql.c_str(), -1, &raw, nullptr);
    detail::SqliteStmtPtr st(raw);
    if (rc != SQLITE_OK)
      return fail(srcPath + ": reading " + t.table + ": " + sqliteMessage(src, rc));
    while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
      int64_t rowid = sqlite3_column_int64(st.get(), 0);
      for (size_t i = 0; i < t.columns.size(); ++i) {
        const ColumnRule &c = t.columns[i];
        int at = 1 + 4 * int(i);
        std::string type = reinterpret_cast<const char *>(sqlite3_column_text(st.get(), at));
        int64_t length = sqlite3_column_int64(st.get(), at + 1);
        auto bad = [&](const std::string &what) {
          return fail(srcPath + ": " + t.table + " row " + llvm::Twine(rowid) + ": " + c.name +
                      " " + what);
        };
        switch (c.kind) {
        case ColumnRule::NullOrKey:
          if (type == "null")
            break;
          [[fallthrough]];
        case ColumnRule::Key:
          if (type != "text")
            return bad("is " + type + ", not text");
          if (length != 64 || sqlite3_column_int64(st.get(), at + 3) != 1)
            return bad("is not 64 lower-case hex digits");
          break;
        case ColumnRule::Text:
          if (type != "text")
            return bad("is " + type + ", not text");
          if (length > c.maxBytes)
            return bad("is " + std::to_string(length) + " characters long; at most " +
                       std::to_string(c.maxBytes) + " are imported");
          break;
        case ColumnRule::Blob:
          if (type != "blob")
            return bad("is " + type + ", not a blob");
          if (length > c.maxBytes)
            return bad("is " + std::to_string(length) + " bytes; at most " +
                       std::to_string(c.maxBytes) + " are imported");
          break;
        case ColumnRule::Int: {
          if (type != "integer")
            return bad("is " + type + ", not an integer");
          int64_t v = sqlite3_column_int64(st.get(), at + 2);
          if (v < c.min || v > c.max)
            return bad("= " + std::to_string(v) + " is outside [" + std::to_string(c.min) + ", " +
                       std::to_string(c.max) + "]");
          break;
        }
        case ColumnRule::Real: {
          if (type != "real" && type != "integer")
            return bad("is " + type + ", not a number");
          double v = sqlite3_column_double(st.get(), at + 2);
          if (!std::isfinite(v) || v < double(c.min) || v > double(c.max))
            return bad("= " + std::to_string(v) + " is outside [" + std::to_string(c.min) + ", " +
                       std::to_string(c.max) + "]");
          break;
        }
        }
      }
    }
    if (rc != SQLITE_DONE)
      return fail(srcPath + ": reading " + t.table + ": " + sqliteMessage(src, rc));
  }
  return llvm::Error::success();
}

/// Text of a column, NULs included.
std::string columnText(sqlite3_stmt *s, int i) {
  const unsigned char *t = sqlite3_column_text(s, i);
  return t ? std::string(reinterpret_cast<const char *>(t), sqlite3_column_bytes(s, i))
           : std::string();
}

} // namespace

namespace {
/// An import of what `in` inspected (a file, or an image named `name`):
/// refused, naming why, unless it is a whole store; else `import` of its
/// database.
template <class Import>
llvm::Expected<int64_t> importInspected(llvm::Expected<Inspection> in, const std::string &name,
                                        Import &&import) {
  if (!in) {
    std::string msg = toString(in.takeError());
    if (msg.compare(0, 14, "tilejit store ") == 0)
      msg.erase(0, 14);
    return rejected("tilejit store import: " + msg + "; nothing imported");
  }
  if (!in->setAside.empty())
    return rejected("tilejit store import: " + name + " " + in->setAside + "; nothing imported");
  return import(in->db.get());
}
} // namespace

llvm::Expected<int64_t> Store::importFrom(const std::string &path, const ImportOptions &options,
                                          ImportReport *report) {
  ImportReport local;
  ImportReport &rep = report ? *report : local;
  rep = ImportReport();
  // Validate the other file completely before this store is touched.
  return importInspected(inspect(path, /*readOnly=*/true, kDefaultBusyTimeoutMs), path,
                         [&](sqlite3 *db) { return importSource(db, path, options, rep); });
}

llvm::Expected<int64_t> Store::importImage(const std::string &image, const std::string &name,
                                           const ImportOptions &options, ImportReport *report) {
  ImportReport local;
  ImportReport &rep = report ? *report : local;
  rep = ImportReport();
  return importInspected(inspectImage(image, name), name,
                         [&](sqlite3 *db) { return importSource(db, name, options, rep); });
}

llvm::Expected<int64_t> Store::importSource(sqlite3 *src, const std::string &path,
                                            const ImportOptions &options, ImportReport &rep) {
  int rc = SQLITE_OK;
  auto version = queryColumn(src, "PRAGMA user_version", rc);
  if (rc != SQLITE_OK || version.size() != 1 || std::atoi(version[0].c_str()) != kSchemaVersion)
    return rejected("tilejit store import: " + path + " is not a tilejit store of schema version " +
                    llvm::Twine(kSchemaVersion) +
                    (rc == SQLITE_OK ? "" : ": " + sqliteMessage(src, rc)) + "; nothing imported");
  // Rows are read from tables only: a view of the same name could make the
  // reads below run any query its author chose, for as long as it likes.
  auto notTables = queryColumn(src,
                               "SELECT name || ' is a ' || type FROM sqlite_master WHERE name IN "
                               "('kernels', 'timings', 'winners', 'failures') AND type != 'table' "
                               "ORDER BY name",
                               rc);
  if (rc != SQLITE_OK || !notTables.empty())
    return rejected("tilejit store import: " + path + ": " +
                    (rc != SQLITE_OK ? sqliteMessage(src, rc) : joined(notTables, 4)) +
                    ", not a table; nothing imported");
  auto dangling = queryColumn(src, "PRAGMA foreign_key_check", rc);
  if (rc != SQLITE_OK || !dangling.empty())
    return rejected("tilejit store import: " + path +
                    " has winners that name missing kernels; nothing imported");

  // One snapshot of the source for the checks and the whole copy.
  rc = sqlite3_exec(src, "BEGIN", nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK)
    return rejected("tilejit store import: " + path + ": " + sqliteMessage(src, rc));
  auto finish = [&](llvm::Error e) {
    sqlite3_exec(src, "COMMIT", nullptr, nullptr, nullptr);
    return e;
  };
  if (auto e = validateImport(src, path))
    return finish(
        rejected("tilejit store import: " + toString(std::move(e)) + "; nothing imported"));
  // The caller's checks of every row, each named by its table and rowid.
  auto checkRow = [&](const ImportedRow &row) -> llvm::Error {
    if (!options.checkRow)
      return llvm::Error::success();
    if (auto e = options.checkRow(row))
      return rejected("tilejit store import: " + path + ": " + row.table + " row " +
                      llvm::Twine(row.rowid) + ": " + toString(std::move(e)) +
                      "; nothing imported");
    return llvm::Error::success();
  };
  if (options.checkRow)
    for (const char *table : {"timings", "winners", "failures"}) {
      sqlite3_stmt *raw = nullptr;
      std::string sql =
          std::string("SELECT rowid, tune_key, config FROM ") + table + " ORDER BY rowid";
      rc = sqlite3_prepare_v2(src, sql.c_str(), -1, &raw, nullptr);
      detail::SqliteStmtPtr st(raw);
      if (rc != SQLITE_OK)
        return finish(
            rejected("tilejit store import: reading " + path + ": " + sqliteMessage(src, rc)));
      while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
        ImportedRow row;
        row.table = table;
        row.rowid = sqlite3_column_int64(st.get(), 0);
        row.tuneKey = columnText(st.get(), 1);
        row.config = columnText(st.get(), 2);
        if (auto e = checkRow(row))
          return finish(std::move(e));
      }
      if (rc != SQLITE_DONE)
        return finish(
            rejected("tilejit store import: reading " + path + ": " + sqliteMessage(src, rc)));
    }

  // Which kernels to take is decided before this store is locked: deciding
  // may mean compiling each one.
  std::vector<int64_t> accepted;
  {
    sqlite3_stmt *raw = nullptr;
    rc = sqlite3_prepare_v2(src,
                            "SELECT key, spec, config, arch, toolchain, launch, workspace_bytes, "
                            "sha256, created_at, ptx, cubin, rowid FROM kernels ORDER BY rowid",
                            -1, &raw, nullptr);
    detail::SqliteStmtPtr st(raw);
    if (rc != SQLITE_OK)
      return finish(
          rejected("tilejit store import: reading " + path + ": " + sqliteMessage(src, rc)));
    while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
      StoredKernel k;
      k.key = columnText(st.get(), 0);
      k.spec = columnText(st.get(), 1);
      k.config = columnText(st.get(), 2);
      k.arch = columnText(st.get(), 3);
      k.toolchain = columnText(st.get(), 4);
      k.launch = columnText(st.get(), 5);
      k.workspaceBytes = sqlite3_column_int64(st.get(), 6);
      k.sha256 = columnText(st.get(), 7);
      k.createdAt = sqlite3_column_int64(st.get(), 8);
      k.ptx = columnText(st.get(), 9);
      const char *b = static_cast<const char *>(sqlite3_column_blob(st.get(), 10));
      if (b)
        k.cubin.assign(b, b + sqlite3_column_bytes(st.get(), 10));
      int64_t rowid = sqlite3_column_int64(st.get(), 11);
      if (sha256Hex(k.cubin.data(), k.cubin.size()) != k.sha256)
        return finish(rejected("tilejit store import: " + path + ": kernels row " +
                               llvm::Twine(rowid) + ": kernel " + k.key +
                               " fails its SHA-256 check; nothing imported"));
      ImportedRow row;
      row.table = "kernels";
      row.rowid = rowid;
      row.kernel = &k;
      if (auto e = checkRow(row))
        return finish(std::move(e));
      std::string why;
      if (options.acceptKernel && options.acceptKernel(k, why)) {
        accepted.push_back(rowid);
        continue;
      }
      if (rep.kernelsLeft++ == 0)
        rep.firstLeft = "kernel " + k.key + (why.empty() ? "" : ": " + why);
    }
    if (rc != SQLITE_DONE)
      return finish(
          rejected("tilejit store import: reading " + path + ": " + sqliteMessage(src, rc)));
  }

  std::lock_guard<std::mutex> lock(mu_);
  int64_t written = 0;
  llvm::Error e = write([&]() -> llvm::Error {
    auto n = importRows(src, path, accepted);
    if (!n)
      return n.takeError();
    written = *n;
    return llvm::Error::success();
  });
  if (e)
    return finish(withContext(std::move(e), path_, "importing " + path + " (nothing imported)"));
  rep.rows = written;
  (void)finish(llvm::Error::success());
  return written;
}

llvm::Expected<int64_t> Store::importRows(sqlite3 *src, const std::string &srcPath,
                                          const std::vector<int64_t> &kernelRows) {
  int64_t written = 0;
  // Reads every row of `sql` from the source; `onRow` writes it here.
  auto copy = [&](const char *sql, auto onRow) -> llvm::Error {
    sqlite3_stmt *raw = nullptr;
    int rc = sqlite3_prepare_v2(src, sql, -1, &raw, nullptr);
    detail::SqliteStmtPtr st(raw);
    if (rc != SQLITE_OK)
      return fail("reading " + srcPath + ": " + sqliteMessage(src, rc));
    while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
      if (auto e = onRow(st.get()))
        return e;
      written += sqlite3_changes64(db_.get());
    }
    if (rc != SQLITE_DONE)
      return fail("reading " + srcPath + ": " + sqliteMessage(src, rc));
    return llvm::Error::success();
  };
  auto text = columnText;

  for (int64_t rowid : kernelRows) {
    sqlite3_stmt *raw = nullptr;
    int rc = sqlite3_prepare_v2(src,
                                "SELECT key, spec, config, arch, toolchain, launch, "
                                "workspace_bytes, sha256, created_at, ptx, cubin FROM kernels "
                                "WHERE rowid = ?1",
                                -1, &raw, nullptr);
    detail::SqliteStmtPtr sel(raw);
    if (rc != SQLITE_OK)
      return fail("reading " + srcPath + ": " + sqliteMessage(src, rc));
    sqlite3_bind_int64(raw, 1, rowid);
    rc = sqlite3_step(raw);
    if (rc != SQLITE_ROW)
      return fail("reading " + srcPath + ": " + sqliteMessage(src, rc));
    sqlite3_stmt *s = raw;
    StoredKernel k;
    k.key = text(s, 0);
    k.sha256 = text(s, 7);
    const char *b = static_cast<const char *>(sqlite3_column_blob(s, 10));
    if (b)
      k.cubin.assign(b, b + sqlite3_column_bytes(s, 10));
    if (!isKernelKey(k.key))
      return fail("kernel key '" + k.key + "' is not 64 lower-case hex digits");
    if (sha256Hex(k.cubin.data(), k.cubin.size()) != k.sha256)
      return fail("kernel " + k.key + " fails its SHA-256 check");
    auto st = statement("INSERT INTO kernels (key, spec, config, arch, toolchain, launch, "
                        "workspace_bytes, sha256, created_at, ptx, cubin) "
                        "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11) "
                        "ON CONFLICT (key) DO NOTHING");
    if (!st)
      return st.takeError();
    st->bind(1, k.key).bind(2, text(s, 1)).bind(3, text(s, 2)).bind(4, text(s, 3));
    st->bind(5, text(s, 4)).bind(6, text(s, 5)).bind(7, int64_t(sqlite3_column_int64(s, 6)));
    st->bind(8, k.sha256).bind(9, int64_t(sqlite3_column_int64(s, 8)));
    st->bind(10, text(s, 9)).bindBlob(11, k.cubin);
    if (auto e = st->run())
      return e;
    written += sqlite3_changes64(db_.get());
  }

  if (auto e = copy("SELECT tune_key, config, median_ms, p20_ms, p80_ms, reps, gpu, sm_count, "
                    "driver_version, sm_clock_mhz, mem_clock_mhz, created_at FROM timings "
                    "ORDER BY id",
                    [&](sqlite3_stmt *s) -> llvm::Error {
                      Timing t;
                      t.tuneKey = text(s, 0);
                      t.config = text(s, 1);
                      t.medianMs = sqlite3_column_double(s, 2);
                      t.p20Ms = sqlite3_column_double(s, 3);
                      t.p80Ms = sqlite3_column_double(s, 4);
                      t.reps = sqlite3_column_int(s, 5);
                      t.gpu = text(s, 6);
                      t.smCount = sqlite3_column_int(s, 7);
                      t.driverVersion = sqlite3_column_int(s, 8);
                      t.smClockMHz = sqlite3_column_int(s, 9);
                      t.memClockMHz = sqlite3_column_int(s, 10);
                      auto st = statement(
                          "INSERT INTO timings (tune_key, config, median_ms, p20_ms, p80_ms, "
                          "reps, gpu, sm_count, driver_version, sm_clock_mhz, mem_clock_mhz, "
                          "created_at) SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12 "
                          "WHERE NOT EXISTS (SELECT 1 FROM timings WHERE tune_key = ?1 AND "
                          "config = ?2 AND median_ms = ?3 AND p20_ms = ?4 AND p80_ms = ?5 AND "
                          "reps = ?6 AND gpu = ?7 AND sm_count = ?8 AND driver_version = ?9 AND "
                          "sm_clock_mhz = ?10 AND mem_clock_mhz = ?11 AND created_at = ?12)");
                      if (!st)
                        return st.takeError();
                      bindTiming(*st, t, sqlite3_column_int64(s, 11));
                      return st->run();
                    }))
    return e;

  if (auto e = copy("SELECT tune_key, config, stage, reason, created_at FROM failures",
                    [&](sqlite3_stmt *s) -> llvm::Error {
                      auto st = statement(
                          "INSERT INTO failures (tune_key, config, stage, reason, created_at) "
                          "VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (tune_key, config) DO UPDATE "
                          "SET stage = excluded.stage, reason = excluded.reason, "
                          "created_at = excluded.created_at "
                          "WHERE excluded.created_at > failures.created_at");
                      if (!st)
                        return st.takeError();
                      st->bind(1, text(s, 0)).bind(2, text(s, 1)).bind(3, text(s, 2));
                      st->bind(4, text(s, 3)).bind(5, int64_t(sqlite3_column_int64(s, 4)));
                      return st->run();
                    }))
    return e;

  if (auto e =
          copy("SELECT tune_key, config, kernel_key, median_ms, reason, chosen_at "
               "FROM winners",
               [&](sqlite3_stmt *s) -> llvm::Error {
                 // A kernel not taken (or not there) leaves the winner
                 // without one: it is compiled here at first use.
                 auto st = statement(
                     "INSERT INTO winners (tune_key, config, kernel_key, median_ms, reason, "
                     "chosen_at) VALUES (?1, ?2, (SELECT key FROM kernels WHERE key = ?3), "
                     "?4, ?5, ?6) ON CONFLICT (tune_key) DO UPDATE SET config = excluded.config, "
                     "kernel_key = excluded.kernel_key, median_ms = excluded.median_ms, "
                     "reason = excluded.reason, chosen_at = excluded.chosen_at "
                     "WHERE excluded.chosen_at > winners.chosen_at");
                 if (!st)
                   return st.takeError();
                 st->bind(1, text(s, 0)).bind(2, text(s, 1)).bindOrNull(3, text(s, 2));
                 st->bind(4, sqlite3_column_double(s, 3)).bind(5, text(s, 4));
                 st->bind(6, int64_t(sqlite3_column_int64(s, 5)));
                 return st->run();
               }))
    return e;
  return written;
}

} // namespace tilejit
