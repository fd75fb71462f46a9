// The index ranges a stream has absorbed (a SoftmaxStream's columns, an AttentionStream's keys),
// kept on the host so that a range given twice is an error, not a silent double count.
#pragma once

#include <kflash/impl/errors.hpp>

#include <cstdint>
#include <iterator>
#include <map>
#include <string>

namespace kflash::impl {

/// Disjoint half-open ranges [begin, end), adjacent ones joined: as many entries as gaps.
class StreamRanges {
 public:
  /// Adds [begin, end); throws std::invalid_argument (from fn, naming `what`) if it overlaps a range
  /// already added. Empty ranges are ignored.
  void add(std::int64_t begin, std::int64_t end, const char* fn, const char* what) {
    if (begin >= end) return;
    auto next = ranges_.lower_bound(begin);
    if (next != ranges_.end() && next->first < end) fail(begin, end, next->first, next->second, fn, what);
    if (next != ranges_.begin()) {
      const auto prev = std::prev(next);
      if (prev->second > begin) fail(begin, end, prev->first, prev->second, fn, what);
      if (prev->second == begin) {  // join the range before
        begin = prev->first;
        ranges_.erase(prev);
      }
    }
    if (next != ranges_.end() && next->first == end) {  // join the range after
      end = next->second;
      ranges_.erase(next);
    }
    ranges_.emplace(begin, end);
  }

  /// Adds every range of `other`, with the same checks.
  void add_all(const StreamRanges& other, const char* fn, const char* what) {
    for (const auto& r : other.ranges_) add(r.first, r.second, fn, what);
  }

  /// The number of indices covered.
  std::int64_t covered() const {
    std::int64_t n = 0;
    for (const auto& r : ranges_) n += r.second - r.first;
    return n;
  }

  /// The first index in [0, n) not covered (n if all are).
  std::int64_t first_gap(std::int64_t n) const {
    if (ranges_.empty() || ranges_.begin()->first > 0) return n > 0 ? 0 : n;
    const std::int64_t e = ranges_.begin()->second;
    return e < n ? e : n;
  }

 private:
  [[noreturn]] static void fail(std::int64_t b, std::int64_t e, std::int64_t ob, std::int64_t oe, const char* fn,
                                const char* what) {
    throw_invalid_argument(fn, std::string(what) + " [" + std::to_string(b) + ", " + std::to_string(e) +
                                   ") overlap " + what + " [" + std::to_string(ob) + ", " + std::to_string(oe) +
                                   ") already absorbed");
  }

  std::map<std::int64_t, std::int64_t> ranges_;
};

}  // namespace kflash::impl
