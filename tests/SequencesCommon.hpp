// What the tests of attention over sequences of their own lengths share: packed (varlen) and paged
// calls built from per-sequence data, each sequence checked against its own long-double reference.
#pragma once

#include <AttentionCommon.hpp>
#include <algorithm>
#include <numeric>

namespace kflash_test {

/// An index View in TEST_EXECSPACE's memory (I: std::int32_t or std::int64_t), row-major.
template <class I, class... E>
auto index_view(const std::vector<std::int64_t>& values, E... extents) {
  return option_view<I>(std::vector<ld>(values.begin(), values.end()), extents...);
}

/// Each sequence b of lengths (nq[b], nk[b]) with the heads and dimensions of `like`, its own data.
template <class T>
std::vector<AttnData<T>> make_sequences(const AttnShape& like, const std::vector<std::size_t>& nq,
                                        const std::vector<std::size_t>& nk, unsigned seed) {
  std::vector<AttnData<T>> seqs;
  for (std::size_t b = 0; b < nq.size(); ++b) {
    AttnShape s = like;
    s.B = 1, s.Nq = nq[b], s.Nk = nk[b];
    seqs.push_back(make_attn_data<T>(s, seed + unsigned(7 * b), 2.0));
  }
  return seqs;
}

/// Checks sequence b's rows of o and lse (as (Nq, Hq, Dv) rows and (Hq) lse values: get_o(h, i, d),
/// get_lse(h, i)) against its reference.
template <class T, class GetO, class GetL>
void expect_sequence(const AttnData<T>& seq, ld scale, const RefTerms& terms, const GetO& get_o, const GetL& get_lse,
                     const std::string& what) {
  const AttnShape& s = seq.s;
  std::vector<ld> o(s.Hq * s.Nq * s.Dv), lse(s.Hq * s.Nq);
  for (std::size_t h = 0; h < s.Hq; ++h)
    for (std::size_t i = 0; i < s.Nq; ++i) {
      lse[h * s.Nq + i] = get_lse(h, i);
      for (std::size_t d = 0; d < s.Dv; ++d) o[(h * s.Nq + i) * s.Dv + d] = get_o(h, i, d);
    }
  const AttnRef ref = reference_attention(seq, scale, terms);
  expect_attention_matches<T>(ref, o, lse, attention_tolerance<T>(ref), what + " " + describe(s));
}

/// Packs the sequences, runs varlen attention with offsets of type I and checks every sequence. With
/// `strided`, q, k, v and o are LayoutStride windows into rows padded by 3 values (as a packed qkv
/// buffer gives them).
template <class T, class I = std::int32_t, class Runner = LibraryAttention<>>
void run_varlen(const std::vector<AttnData<T>>& seqs, kflash::AttentionOptions opt, const RefTerms& terms,
                const std::string& what, const Runner& run = {}, bool strided = false) {
  const AttnShape& s = seqs.front().s;
  std::vector<std::int64_t> cu_q{0}, cu_k{0};
  for (const auto& q : seqs) {
    cu_q.push_back(cu_q.back() + std::int64_t(q.s.Nq));
    cu_k.push_back(cu_k.back() + std::int64_t(q.s.Nk));
  }
  const std::size_t tq = std::size_t(cu_q.back()), tk = std::size_t(cu_k.back());
  using V3 = Kokkos::View<T***, Kokkos::LayoutRight, AMem>;
  V3 q("q", tq, s.Hq, s.D), k("k", tk, s.Hk, s.D), v("v", tk, s.Hk, s.Dv), o("o", tq, s.Hq, s.Dv);
  Kokkos::View<T**, Kokkos::LayoutRight, AMem> lse("lse", s.Hq, tq);
  auto hq = Kokkos::create_mirror_view(q), hk = Kokkos::create_mirror_view(k), hv = Kokkos::create_mirror_view(v);
  for (std::size_t b = 0; b < seqs.size(); ++b) {
    const AttnShape& sb = seqs[b].s;
    for (std::size_t h = 0; h < s.Hq; ++h)
      for (std::size_t i = 0; i < sb.Nq; ++i)
        for (std::size_t d = 0; d < s.D; ++d) hq(cu_q[b] + i, h, d) = seqs[b].q[(h * sb.Nq + i) * s.D + d];
    for (std::size_t h = 0; h < s.Hk; ++h)
      for (std::size_t j = 0; j < sb.Nk; ++j) {
        for (std::size_t d = 0; d < s.D; ++d) hk(cu_k[b] + j, h, d) = seqs[b].k[(h * sb.Nk + j) * s.D + d];
        for (std::size_t d = 0; d < s.Dv; ++d) hv(cu_k[b] + j, h, d) = seqs[b].v[(h * sb.Nk + j) * s.Dv + d];
      }
  }
  Kokkos::deep_copy(q, hq), Kokkos::deep_copy(k, hk), Kokkos::deep_copy(v, hv);
  Kokkos::deep_copy(o, T(9));
  opt = with_terms<T>(opt, s, terms);
  opt.cu_seqlens_q = index_view<I>(cu_q, cu_q.size());
  opt.cu_seqlens_k = index_view<I>(cu_k, cu_k.size());
  if (strided) {
    auto padded = [](const V3& a) {
      const V3 wide("wide", a.extent(0), a.extent(1), a.extent(2) + 3);
      const auto window = Kokkos::subview(wide, Kokkos::ALL, Kokkos::ALL, std::make_pair(std::size_t(0), a.extent(2)));
      Kokkos::deep_copy(window, a);
      return window;
    };
    const auto qs = padded(q), ks = padded(k), vs = padded(v), os = padded(o);
    run(qs, ks, vs, os, opt, lse);
    Kokkos::deep_copy(o, os);
  } else {
    run(q, k, v, o, opt, lse);
  }
  auto ho = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), o);
  auto hl = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), lse);
  const ld scale = opt.scale != 0 ? opt.scale : 1 / std::sqrt(ld(s.D));
  for (std::size_t b = 0; b < seqs.size() && !::testing::Test::HasFailure(); ++b) {
    const std::size_t r0 = std::size_t(cu_q[b]);
    expect_sequence(
        seqs[b], scale, terms, [&](std::size_t h, std::size_t i, std::size_t d) { return ld(ho(r0 + i, h, d)); },
        [&](std::size_t h, std::size_t i) { return ld(hl(h, r0 + i)); },
        what + " varlen sequence " + std::to_string(b) + " schedule " + std::to_string(int(opt.schedule)));
  }
}

/// Writes the sequences' keys into shuffled pages of page_size slots (the slots and table entries
/// past each sequence hold NaN and -1), runs paged attention on q (B, Hq, Nq, D) and checks every
/// sequence.
template <class T, class I = std::int32_t, class Runner = LibraryAttention<>>
void run_paged(const std::vector<AttnData<T>>& seqs, std::size_t page_size, kflash::AttentionOptions opt,
               const RefTerms& terms, const std::string& what, const Runner& run = {}) {
  const AttnShape& s = seqs.front().s;
  const std::size_t B = seqs.size(), Nq = s.Nq;
  std::size_t max_pages = 1, pages = 0;
  for (const auto& q : seqs) {
    const std::size_t n = (q.s.Nk + page_size - 1) / page_size;
    max_pages = std::max(max_pages, n + 1);  // one table entry more than needed, left at -1
    pages += n;
  }
  pages += 2;  // pages no sequence uses
  std::vector<std::int64_t> order(pages);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(91));
  using V4 = Kokkos::View<T****, Kokkos::LayoutRight, AMem>;
  V4 q("q", B, s.Hq, Nq, s.D), kc("k_cache", pages, page_size, s.Hk, s.D), vc("v_cache", pages, page_size, s.Hk, s.Dv),
      o("o", B, s.Hq, Nq, s.Dv);
  Kokkos::View<T***, Kokkos::LayoutRight, AMem> lse("lse", B, s.Hq, Nq);
  auto hq = Kokkos::create_mirror_view(q), hk = Kokkos::create_mirror_view(kc), hv = Kokkos::create_mirror_view(vc);
  Kokkos::deep_copy(hk, std::numeric_limits<T>::quiet_NaN());
  Kokkos::deep_copy(hv, std::numeric_limits<T>::quiet_NaN());
  std::vector<std::int64_t> table(B * max_pages, -1), lengths(B);
  std::size_t next = 0;
  for (std::size_t b = 0; b < B; ++b) {
    const AttnShape& sb = seqs[b].s;
    lengths[b] = std::int64_t(sb.Nk);
    for (std::size_t h = 0; h < s.Hq; ++h)
      for (std::size_t i = 0; i < Nq; ++i)
        for (std::size_t d = 0; d < s.D; ++d) hq(b, h, i, d) = seqs[b].q[(h * Nq + i) * s.D + d];
    for (std::size_t j = 0; j < sb.Nk; ++j) {
      if (j % page_size == 0) table[b * max_pages + j / page_size] = order[next++];
      const std::size_t page = std::size_t(table[b * max_pages + j / page_size]), slot = j % page_size;
      for (std::size_t h = 0; h < s.Hk; ++h) {
        for (std::size_t d = 0; d < s.D; ++d) hk(page, slot, h, d) = seqs[b].k[(h * sb.Nk + j) * s.D + d];
        for (std::size_t d = 0; d < s.Dv; ++d) hv(page, slot, h, d) = seqs[b].v[(h * sb.Nk + j) * s.Dv + d];
      }
    }
  }
  Kokkos::deep_copy(q, hq), Kokkos::deep_copy(kc, hk), Kokkos::deep_copy(vc, hv);
  Kokkos::deep_copy(o, T(9));
  opt = with_terms<T>(opt, s, terms);
  opt.block_table = index_view<I>(table, B, max_pages);
  opt.cache_seqlens = index_view<I>(lengths, B);
  run(q, kc, vc, o, opt, lse);
  auto ho = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), o);
  auto hl = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), lse);
  const ld scale = opt.scale != 0 ? opt.scale : 1 / std::sqrt(ld(s.D));
  for (std::size_t b = 0; b < B && !::testing::Test::HasFailure(); ++b) {
    expect_sequence(
        seqs[b], scale, terms, [&](std::size_t h, std::size_t i, std::size_t d) { return ld(ho(b, h, i, d)); },
        [&](std::size_t h, std::size_t i) { return ld(hl(b, h, i)); },
        what + " paged (page " + std::to_string(page_size) + ") sequence " + std::to_string(b) + " schedule " +
            std::to_string(int(opt.schedule)));
  }
}

}  // namespace kflash_test
