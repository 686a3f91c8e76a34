/*
 * loss.bpf.c - 5% packet loss as a tc eBPF program (direct action), for
 * the namespace test where the kernel has no netem: loaded on a veth's
 * egress with `tc filter add dev DEV egress bpf da obj loss.bpf.o sec tc`.
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>

static __u32 (*get_prandom_u32)(void) = (void *)BPF_FUNC_get_prandom_u32;

__attribute__((section("tc"), used)) int
drop_five_percent(struct __sk_buff *skb)
{
	return get_prandom_u32() % 100 < 5 ? TC_ACT_SHOT : TC_ACT_OK;
}

char _license[] __attribute__((section("license"), used)) = "GPL";
