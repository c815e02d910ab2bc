/*-------------------------------------------------------------------------
 *
 * jansson_wrap.c
 *	  The one jansson function the postgres executable shadows.
 *
 * The postgres executable exports a function named json_object (the SQL
 * function json_object(text[])), and the dynamic linker resolves a
 * library's references in the global scope, the executable first: a
 * reference to jansson's versioned json_object@JANSSON_4 is satisfied by
 * the executable's unversioned definition.  So the etcd client, loaded
 * into a backend, would call PostgreSQL's json_object for every JSON
 * object it builds (and crash).  No other symbol of libcurl, jansson or
 * their dependencies collides with one the executable exports (checked
 * with nm when this was written: see src/coordinator/README.md).
 *
 * silo_coordinator.so is therefore linked with -Wl,--wrap=json_object
 * (mk/coordinator.mk): the client's calls land in __wrap_json_object,
 * which calls jansson's own, looked up in the library that defines
 * json_loads (a name only jansson has).  The library's own calls are not
 * affected: libjansson binds its internal calls at its link time.  This
 * file does not include jansson.h; it takes only addresses.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_coordinator.h"

#include <dlfcn.h>

typedef void *(*JanssonObjectFn) (void);

/* jansson's json_loads, declared only to find its library by address */
extern void *json_loads(const char *input, size_t flags, void *error);

extern void *__wrap_json_object(void) __attribute__((visibility("hidden")));

/*
 * jansson_json_object: jansson's json_object, or NULL if it cannot be
 * found (then every JSON object fails to build, as on out of memory, and
 * every etcd call fails with ETCD_NO_MEMORY: loud, not wrong).
 */
static JanssonObjectFn
jansson_json_object(void)
{
	static JanssonObjectFn fn = NULL;
	static bool looked = false;
	Dl_info		info;
	void	   *lib;

	if (looked)
		return fn;
	looked = true;
	if (dladdr((void *) &json_loads, &info) == 0 || info.dli_fname == NULL)
		return NULL;
	lib = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
	if (lib == NULL)
		return NULL;
	fn = (JanssonObjectFn) dlsym(lib, "json_object");
	return fn;
}

/*
 * __wrap_json_object: what the etcd client's json_object() calls become.
 */
void *
__wrap_json_object(void)
{
	JanssonObjectFn fn = jansson_json_object();

	return fn != NULL ? fn() : NULL;
}
