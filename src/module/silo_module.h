/*-------------------------------------------------------------------------
 *
 * silo_module.h
 *	  Module load (module.c): the top of the layers, which may call every
 *	  other folder (src/README.md).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SILO_MODULE_H
#define SILO_MODULE_H

#include "silo_bgw.h"

extern void _PG_init(void);

#endif							/* SILO_MODULE_H */
