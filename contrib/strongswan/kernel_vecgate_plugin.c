/*
 * kernel-vecgate plugin: registration with charon's plugin loader.
 */

#include "kernel_vecgate_plugin.h"
#include "kernel_vecgate_ipsec.h"

typedef struct private_kernel_vecgate_plugin_t private_kernel_vecgate_plugin_t;

struct private_kernel_vecgate_plugin_t {

	/** public interface */
	kernel_vecgate_plugin_t public;
};

METHOD(plugin_t, get_name, char*,
	private_kernel_vecgate_plugin_t *this)
{
	return "kernel-vecgate";
}

METHOD(plugin_t, get_features, int,
	private_kernel_vecgate_plugin_t *this, plugin_feature_t *features[])
{
	/* Only the IPsec half of a kernel backend: routes, addresses and
	 * interfaces stay with kernel-netlink. charon takes the first
	 * "kernel-ipsec" provider that registers, so this plugin must be listed
	 * before kernel-netlink (and kernel-libipsec must not be loaded). The RNG
	 * is for the SPIs we hand out in get_spi(). */
	static plugin_feature_t f[] = {
		PLUGIN_CALLBACK(kernel_ipsec_register, kernel_vecgate_ipsec_create),
			PLUGIN_PROVIDE(CUSTOM, "kernel-ipsec"),
				PLUGIN_DEPENDS(RNG, RNG_WEAK),
	};
	*features = f;
	return countof(f);
}

METHOD(plugin_t, destroy, void,
	private_kernel_vecgate_plugin_t *this)
{
	free(this);
}

/*
 * See header
 */
plugin_t *kernel_vecgate_plugin_create()
{
	private_kernel_vecgate_plugin_t *this;

	INIT(this,
		.public = {
			.plugin = {
				.get_name = _get_name,
				.get_features = _get_features,
				.destroy = _destroy,
			},
		},
	);
	return &this->public.plugin;
}
