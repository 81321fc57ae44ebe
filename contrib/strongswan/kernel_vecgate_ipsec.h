/*
 * kernel_vecgate_ipsec: charon's kernel_ipsec_t backed by vecgate's JSON API.
 *
 * Each ESP SA charon installs becomes one vecgate SA ("ipsec_sa_add"), each SA
 * charon deletes is removed again ("ipsec_sa_del"). One connection to the API
 * socket per request: write one JSON object and "\n", read one line back.
 *
 * Settings (strongswan.conf, charon.plugins.kernel-vecgate.*):
 *   socket       path of vecgate's API socket (required)
 *   first_index  first vecgate SA index handed out (default 1000)
 *   indexes      how many indexes from first_index on (default 1000); the
 *                range is ours: SAs an earlier run left in it are removed at
 *                start
 *   urpf         strict (default), loose or off: set on inbound tunnel SAs
 *
 * vecgate's SAs here are route-based: an outbound tunnel-mode SA gets a route
 * into its tunnel interface for each of the peer's traffic selectors, and the
 * policy calls are accepted without doing anything. Therefore every traffic
 * selector on the peer's side of a tunnel-mode SA must be exactly one subnet
 * with any protocol and any port; anything else (an address range that is not
 * a prefix, a protocol, a port range) is refused with NOT_SUPPORTED, on the
 * inbound SA already, so the CHILD_SA fails before anything reaches vecgate.
 *
 * Supported: ESP only (no AH, no IPComp), tunnel mode only (vecgate's
 * transport-mode SAs protect what SPD policies select, and the policies are not
 * installed), with
 * AES-GCM-128/256 (16-byte ICV), ChaCha20-Poly1305, AES-CBC-128/256 with
 * HMAC-SHA2-256-128, NULL with HMAC-SHA2-256-128, and NULL without integrity.
 * SAs are updated in place when their endpoints change (a peer's NAT mapping
 * seen anew on an IKE message, or MOBIKE): "ipsec_sa_update" with the new
 * addresses and UDP ports keeps keys, sequence numbers and replay windows.
 * Queries answer vecgate's
 * counts (payload bytes and packets, "show_ipsec_sa"), so `swanctl --list-sas`
 * shows them and DPD sees traffic.
 *
 * Lifetimes: charon rekeys a CHILD_SA when its backend reports a soft expire
 * and deletes it on a hard one, so the plugin reports them as the kernel
 * would. Time limits are scheduler jobs of ours (as in libipsec). Byte and
 * packet limits go to vecgate with the SA, which drops packets past the hard
 * ones; vecgate sends no events, so while an SA has such a limit a job reads
 * all SAs' counts every second and reports a limit the counts reached. A soft
 * expire is reported once; on a hard one the SA is removed from vecgate at
 * once, before charon hears of it.
 */

#ifndef KERNEL_VECGATE_IPSEC_H_
#define KERNEL_VECGATE_IPSEC_H_

#include <library.h>
#include <kernel/kernel_ipsec.h>

typedef struct kernel_vecgate_ipsec_t kernel_vecgate_ipsec_t;

struct kernel_vecgate_ipsec_t {

	/** implements kernel_ipsec_t */
	kernel_ipsec_t interface;
};

/**
 * Create the backend; NULL if the settings are missing or invalid.
 */
kernel_vecgate_ipsec_t *kernel_vecgate_ipsec_create();

#endif /* KERNEL_VECGATE_IPSEC_H_ */
