/**
 * Connection strings for cluster mode.  A node's advertised conninfo
 * (silo.advertise_conninfo, the owner_conninfo of silo.cluster_info and of
 * an SL020's DETAIL) says where the node is, never who you are: the
 * connection to an owner takes the hint's host, hostaddr and port (and
 * whatever else the hint says, such as dbname) and keeps everything else
 * of the connection string you gave (user, password, sslmode), as
 * siloctl does (docs/cluster.md, "How a tenant's call finds its node").
 */

import type pg from 'pg';

/** libpq keywords and their values. */
export type Conninfo = Record<string, string>;

/** The URL parameters and keywords libpq spells differently. */
const URL_ALIASES: Record<string, string> = { database: 'dbname', username: 'user' };

/** Parse a postgres:// or postgresql:// URL into libpq keywords. */
function parseUrl(s: string): Conninfo {
  const out: Conninfo = {};
  let rest = s.replace(/^postgres(?:ql)?:\/\//, '');
  let query = '';
  const q = rest.indexOf('?');
  if (q >= 0) {
    query = rest.slice(q + 1);
    rest = rest.slice(0, q);
  }
  const slash = rest.indexOf('/');
  const authority = slash >= 0 ? rest.slice(0, slash) : rest;
  const path = slash >= 0 ? rest.slice(slash + 1) : '';
  const at = authority.lastIndexOf('@');
  const userinfo = at >= 0 ? authority.slice(0, at) : '';
  const hostport = at >= 0 ? authority.slice(at + 1) : authority;
  if (userinfo) {
    const colon = userinfo.indexOf(':');
    out.user = decodeURIComponent(colon >= 0 ? userinfo.slice(0, colon) : userinfo);
    if (colon >= 0) out.password = decodeURIComponent(userinfo.slice(colon + 1));
  }
  if (hostport) {
    const m = /^(\[[^\]]*\]|[^:]*)(?::(\d*))?$/.exec(hostport);
    const host = m ? m[1] : hostport;
    if (host) out.host = decodeURIComponent(host.replace(/^\[(.*)\]$/, '$1'));
    if (m && m[2]) out.port = m[2];
  }
  if (path) out.dbname = decodeURIComponent(path);
  for (const pair of query.split('&')) {
    if (!pair) continue;
    const eq = pair.indexOf('=');
    const k = decodeURIComponent(eq >= 0 ? pair.slice(0, eq) : pair);
    const v = decodeURIComponent((eq >= 0 ? pair.slice(eq + 1) : '').replace(/\+/g, ' '));
    out[URL_ALIASES[k] ?? k] = v;
  }
  return out;
}

/** Parse libpq's keyword = value form (values may be single-quoted, with backslash escapes). */
function parseKeywords(s: string): Conninfo {
  const out: Conninfo = {};
  let i = 0;
  const n = s.length;
  const space = (c: string): boolean => c === ' ' || c === '\t' || c === '\n' || c === '\r';
  while (i < n) {
    while (i < n && space(s[i])) i++;
    if (i >= n) break;
    let key = '';
    while (i < n && s[i] !== '=' && !space(s[i])) key += s[i++];
    while (i < n && space(s[i])) i++;
    if (s[i] !== '=') throw new Error(`missing "=" after "${key}" in connection info string`);
    i++;
    while (i < n && space(s[i])) i++;
    let value = '';
    if (s[i] === "'") {
      i++;
      for (;;) {
        if (i >= n) throw new Error('unterminated quoted string in connection info string');
        if (s[i] === '\\' && i + 1 < n) {
          value += s[i + 1];
          i += 2;
        } else if (s[i] === "'") {
          i++;
          break;
        } else {
          value += s[i++];
        }
      }
    } else {
      while (i < n && !space(s[i])) {
        if (s[i] === '\\' && i + 1 < n) {
          value += s[i + 1];
          i += 2;
        } else {
          value += s[i++];
        }
      }
    }
    out[key] = value;
  }
  return out;
}

/** A connection string (URL or keyword = value) as libpq keywords. */
export function parseConninfo(s: string): Conninfo {
  return /^postgres(?:ql)?:\/\//.test(s) ? parseUrl(s) : parseKeywords(s);
}

/**
 * The connection to an owner: seed's keywords without its host, hostaddr
 * and port, then every keyword of the hint.
 */
export function mergeConninfo(seed: Conninfo, hint: Conninfo): Conninfo {
  const out: Conninfo = { ...seed };
  delete out.host;
  delete out.hostaddr;
  delete out.port;
  return { ...out, ...hint };
}

/** node-postgres options for libpq keywords (the ones pg understands). */
export function pgConfigOf(c: Conninfo): pg.ClientConfig {
  const cfg: pg.ClientConfig = {};
  const host = c.hostaddr || c.host;
  if (host) cfg.host = host;
  if (c.port) cfg.port = Number(c.port);
  if (c.dbname) cfg.database = c.dbname;
  if (c.user) cfg.user = c.user;
  if (c.password !== undefined) cfg.password = c.password;
  if (c.application_name) cfg.application_name = c.application_name;
  if (c.options) cfg.options = c.options;
  if (c.connect_timeout) cfg.connectionTimeoutMillis = Number(c.connect_timeout) * 1000;
  if (c.sslmode) {
    if (c.sslmode === 'disable') cfg.ssl = false;
    else if (c.sslmode === 'verify-full' || c.sslmode === 'verify-ca') cfg.ssl = true;
    else if (c.sslmode !== 'prefer' && c.sslmode !== 'allow') cfg.ssl = { rejectUnauthorized: false };
  }
  return cfg;
}

/** libpq keywords of node-postgres options (the inverse of pgConfigOf, for a seed given as options). */
export function conninfoOfConfig(cfg: pg.ClientConfig): Conninfo {
  const out: Conninfo = cfg.connectionString ? parseConninfo(cfg.connectionString) : {};
  if (cfg.host) out.host = cfg.host;
  if (cfg.port) out.port = String(cfg.port);
  if (cfg.database) out.dbname = cfg.database;
  if (cfg.user) out.user = cfg.user;
  if (typeof cfg.password === 'string') out.password = cfg.password;
  return out;
}
