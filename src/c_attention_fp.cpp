// AttentionCalls for float and double q, k, v and o.
#include "c_attention_typed.hpp"

template struct kflash::c_interface::AttentionCalls<float>;
template struct kflash::c_interface::AttentionCalls<double>;
