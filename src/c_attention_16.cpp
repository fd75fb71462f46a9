// AttentionCalls for bhalf_t and half_t q, k, v and o.
#include "c_attention_typed.hpp"

template struct kflash::c_interface::AttentionCalls<kflash::bhalf_t>;
template struct kflash::c_interface::AttentionCalls<kflash::half_t>;
