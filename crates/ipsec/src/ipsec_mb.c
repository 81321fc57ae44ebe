/*
 * Glue to Intel's IPsec Multi-Buffer library (intel-ipsec-mb): its API is macros over
 * function pointers in an IMB_MGR that the library fills for the CPU at run time, which
 * Rust cannot expand. This hands the AES-GCM pointers to Rust once; packets then call
 * them directly (src/ipsec_mb.rs), with no C frame of ours in between.
 */
#include <stddef.h>
#include <stdint.h>
#include <intel-ipsec-mb.h>

/* Keep in step with `Functions` in src/ipsec_mb.rs. */
struct vg_imb_gcm {
        aes_gcm_pre_t pre128;
        aes_gcm_pre_t pre256;
        aes_gcm_enc_dec_t enc128;
        aes_gcm_enc_dec_t dec128;
        aes_gcm_enc_dec_t enc256;
        aes_gcm_enc_dec_t dec256;
        uint64_t features;
        uint32_t arch;
        uint32_t key_data_size;
        uint32_t context_size;
};

/*
 * The code the library picked, in the numbering of `ARCH_NAMES` in src/ipsec_mb.rs (1.x's
 * IMB_ARCH): 2.0 dropped the no-AES-NI and AVX code and renumbered the rest.
 */
static uint32_t vg_arch(IMB_ARCH arch)
{
#if IMB_VERSION_NUM >= IMB_VERSION(2, 0, 0)
        switch (arch) {
        case IMB_ARCH_SSE:
                return 2;
        case IMB_ARCH_AVX2:
                return 4;
        case IMB_ARCH_AVX512:
                return 5;
        default:
                return 0;
        }
#else
        return (uint32_t)arch;
#endif
}

/* 0 and `out` filled, or the library's error number. */
int vg_imb_gcm_init(struct vg_imb_gcm *out)
{
        IMB_ARCH arch = IMB_ARCH_NONE;
        IMB_MGR *m = alloc_mb_mgr(0);
        int err;

        if (m == NULL)
                return -1;
        init_mb_mgr_auto(m, &arch);
        err = imb_get_errno(m);
        if (err == 0) {
                out->pre128 = m->gcm128_pre;
                out->pre256 = m->gcm256_pre;
                out->enc128 = m->gcm128_enc;
                out->dec128 = m->gcm128_dec;
                out->enc256 = m->gcm256_enc;
                out->dec256 = m->gcm256_dec;
                out->features = m->features;
                out->arch = vg_arch(arch);
                out->key_data_size = (uint32_t)sizeof(struct gcm_key_data);
                out->context_size = (uint32_t)sizeof(struct gcm_context_data);
        }
        /* The direct GCM functions take no manager: they are code, not state of it. */
        free_mb_mgr(m);
        return err;
}
