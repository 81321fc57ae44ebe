/*
 * kernel-vecgate: a strongSwan (charon) plugin that installs the ESP SAs
 * negotiated by IKE into vecgate, through vecgate's JSON API on a Unix
 * socket, instead of into the kernel's XFRM.
 *
 * See kernel_vecgate_ipsec.h for what it does and what it refuses.
 *
 * Loading (strongSwan 5.9.8 has no setting for extra plugin directories):
 * either copy libstrongswan-kernel-vecgate.so into /usr/lib/ipsec/plugins,
 * or start charon with LD_PRELOAD=/path/to/libstrongswan-kernel-vecgate.so
 * (the loader finds kernel_vecgate_plugin_create in the process before it
 * looks for a file). List it before kernel-netlink and mark it critical,
 *   charon.load = ... kernel-vecgate! kernel-netlink ...
 * or a missing socket setting silently leaves SAs to the kernel's XFRM.
 */

#ifndef KERNEL_VECGATE_PLUGIN_H_
#define KERNEL_VECGATE_PLUGIN_H_

#include <library.h>
#include <plugins/plugin.h>

typedef struct kernel_vecgate_plugin_t kernel_vecgate_plugin_t;

/**
 * The plugin: it only provides the "kernel-ipsec" feature.
 */
struct kernel_vecgate_plugin_t {

	/** implements plugin_t */
	plugin_t plugin;
};

/**
 * Plugin constructor; charon finds it as "<name>_plugin_create" with the
 * dashes of the plugin name turned into underscores.
 */
plugin_t *kernel_vecgate_plugin_create();

#endif /* KERNEL_VECGATE_PLUGIN_H_ */
