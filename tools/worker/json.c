/*-------------------------------------------------------------------------
 *
 * json.c
 *	  JSON helpers of the reference worker: a string escaper and a syntax
 *	  checker, plus the UTF-8 cleaning of plain text parameters.
 *
 * A command's stdout becomes the job result as-is when it is JSON that
 * jsonb will accept, and is wrapped as a JSON string otherwise; stderr is
 * always wrapped.  Both must be valid UTF-8 without NUL bytes by the time
 * they reach the server, which is what these helpers guarantee.  The error
 * text of a failed refresh is a plain text parameter with a length limit in
 * characters: utf8_append_clean() and friends prepare it.
 *
 * Building with -DSILO_WORKER_SELFTEST replaces the worker's main() by the
 * self-test at the end of this file; in this directory:
 *	  cc -std=gnu11 -DSILO_WORKER_SELFTEST -I`pg_config --includedir` *.c -lpq
 *	  ./a.out
 *
 * tools/worker/json.c
 *
 *-------------------------------------------------------------------------
 */
#include "silo_worker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JSON_MAX_DEPTH		512 /* deeper output is treated as plain text */

/*
 * json_utf8_len
 *		Length of the well-formed UTF-8 sequence at s, or 0 if it is not one
 *		(overlongs, surrogates and code points past U+10FFFF are rejected).
 *		PostgreSQL refuses such bytes, so they must never reach it.
 */
static size_t
json_utf8_len(const unsigned char *s, size_t avail)
{
	unsigned char lo = 0x80,
				hi = 0xBF;
	size_t		n,
				i;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xC2 && s[0] <= 0xDF)
		n = 2;
	else if (s[0] >= 0xE0 && s[0] <= 0xEF)
	{
		n = 3;
		if (s[0] == 0xE0)
			lo = 0xA0;
		else if (s[0] == 0xED)
			hi = 0x9F;
	}
	else if (s[0] >= 0xF0 && s[0] <= 0xF4)
	{
		n = 4;
		if (s[0] == 0xF0)
			lo = 0x90;
		else if (s[0] == 0xF4)
			hi = 0x8F;
	}
	else
		return 0;
	if (avail < n || s[1] < lo || s[1] > hi)
		return 0;
	for (i = 2; i < n; i++)
		if ((s[i] & 0xC0) != 0x80)
			return 0;
	return n;
}

/*
 * json_append_string
 *		Append text as a quoted JSON string.  Invalid UTF-8 and NUL bytes
 *		become U+FFFD because jsonb can store neither.
 */
void
json_append_string(StrBuf *sb, const char *text, size_t len)
{
	const unsigned char *s = (const unsigned char *) text;
	size_t		i = 0;
	char		esc[8];

	sb_append(sb, "\"", 1);
	while (i < len)
	{
		unsigned char c = s[i];
		size_t		n;

		if (c >= 0x80)
		{
			if ((n = json_utf8_len(s + i, len - i)) == 0)
			{
				sb_puts(sb, "\\ufffd");
				n = 1;
			}
			else
				sb_append(sb, text + i, n);
			i += n;
			continue;
		}
		if (c == '"' || c == '\\')
		{
			esc[0] = '\\';
			esc[1] = (char) c;
			sb_append(sb, esc, 2);
		}
		else if (c == '\n')
			sb_puts(sb, "\\n");
		else if (c == '\r')
			sb_puts(sb, "\\r");
		else if (c == '\t')
			sb_puts(sb, "\\t");
		else if (c == '\0')
			sb_puts(sb, "\\ufffd");
		else if (c < 0x20)
		{
			snprintf(esc, sizeof(esc), "\\u%04x", c);
			sb_puts(sb, esc);
		}
		else
			sb_append(sb, text + i, 1);
		i++;
	}
	sb_append(sb, "\"", 1);
}

/*
 * utf8_append_clean
 *		Append text as valid UTF-8 for a text parameter: invalid sequences
 *		and NUL bytes become U+FFFD, everything else is copied as it is.
 */
void
utf8_append_clean(StrBuf *sb, const char *text, size_t len)
{
	const unsigned char *s = (const unsigned char *) text;
	size_t		i = 0;

	while (i < len)
	{
		size_t		n = s[i] == '\0' ? 0 : json_utf8_len(s + i, len - i);

		if (n == 0)
		{
			sb_puts(sb, "\xef\xbf\xbd");	/* U+FFFD */
			n = 1;
		}
		else
			sb_append(sb, text + i, n);
		i += n;
	}
}

/*
 * utf8_chars
 *		Number of characters in a valid UTF-8 string.
 */
size_t
utf8_chars(const char *s)
{
	size_t		n = 0;

	for (; *s; s++)
		if (((unsigned char) *s & 0xC0) != 0x80)
			n++;
	return n;
}

/*
 * utf8_skip_chars
 *		Pointer just past the first n characters of a valid UTF-8 string (or
 *		to its end if it is shorter).
 */
const char *
utf8_skip_chars(const char *s, size_t n)
{
	while (*s && n > 0)
	{
		s++;
		while (((unsigned char) *s & 0xC0) == 0x80)
			s++;
		n--;
	}
	return s;
}

/* Cursor of the JSON syntax checker. */
typedef struct JsonCursor
{
	const unsigned char *p;
	const unsigned char *end;
	int			depth;
} JsonCursor;

static bool json_value(JsonCursor *c);

/*
 * json_ws
 *		Skip the four whitespace characters JSON allows between tokens.
 */
static void
json_ws(JsonCursor *c)
{
	while (c->p < c->end &&
		   (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
		c->p++;
}

/*
 * json_hex4
 *		Read the four hex digits of a \u escape into *cp.
 */
static bool
json_hex4(JsonCursor *c, unsigned int *cp)
{
	int			i;

	if (c->end - c->p < 4)
		return false;
	*cp = 0;
	for (i = 0; i < 4; i++)
	{
		unsigned char h = *c->p++;

		*cp <<= 4;
		if (h >= '0' && h <= '9')
			*cp |= h - '0';
		else if (h >= 'a' && h <= 'f')
			*cp |= h - 'a' + 10;
		else if (h >= 'A' && h <= 'F')
			*cp |= h - 'A' + 10;
		else
			return false;
	}
	return true;
}

/*
 * json_string
 *		Check a string token starting at its opening quote.  Besides the RFC
 *		rules it refuses what jsonb would refuse: \u0000 and lone surrogates.
 */
static bool
json_string(JsonCursor *c)
{
	c->p++;
	while (c->p < c->end)
	{
		unsigned char ch = *c->p;
		unsigned int cp,
					lo;
		size_t		n;

		if (ch == '"')
		{
			c->p++;
			return true;
		}
		if (ch < 0x20)
			return false;
		if (ch >= 0x80)
		{
			if ((n = json_utf8_len(c->p, (size_t) (c->end - c->p))) == 0)
				return false;
			c->p += n;
			continue;
		}
		c->p++;
		if (ch != '\\')
			continue;
		if (c->p >= c->end)
			return false;
		ch = *c->p++;
		if (strchr("\"\\/bfnrt", ch) != NULL && ch != '\0')
			continue;
		if (ch != 'u' || !json_hex4(c, &cp) || cp == 0 ||
			(cp >= 0xDC00 && cp <= 0xDFFF))
			return false;
		if (cp >= 0xD800 && cp <= 0xDBFF)
		{
			if (c->end - c->p < 2 || c->p[0] != '\\' || c->p[1] != 'u')
				return false;
			c->p += 2;
			if (!json_hex4(c, &lo) || lo < 0xDC00 || lo > 0xDFFF)
				return false;
		}
	}
	return false;
}

/*
 * json_digits
 *		Skip a run of decimal digits; false if there is not at least one.
 */
static bool
json_digits(JsonCursor *c)
{
	const unsigned char *start = c->p;

	while (c->p < c->end && *c->p >= '0' && *c->p <= '9')
		c->p++;
	return c->p > start;
}

/*
 * json_number
 *		Check a number: -? (0 | [1-9][0-9]*) (.[0-9]+)? ([eE][+-]?[0-9]+)?
 */
static bool
json_number(JsonCursor *c)
{
	if (c->p < c->end && *c->p == '-')
		c->p++;
	if (c->p < c->end && *c->p == '0')
		c->p++;
	else if (c->p >= c->end || *c->p < '1' || *c->p > '9' || !json_digits(c))
		return false;
	if (c->p < c->end && *c->p == '.')
	{
		c->p++;
		if (!json_digits(c))
			return false;
	}
	if (c->p < c->end && (*c->p == 'e' || *c->p == 'E'))
	{
		c->p++;
		if (c->p < c->end && (*c->p == '+' || *c->p == '-'))
			c->p++;
		if (!json_digits(c))
			return false;
	}
	return true;
}

/*
 * json_container
 *		Check an object or array starting at its opening bracket.  Objects
 *		and arrays share the comma/closer logic; objects add "key":.
 */
static bool
json_container(JsonCursor *c)
{
	bool		is_object = (*c->p == '{');
	unsigned char closer = is_object ? '}' : ']';

	if (++c->depth > JSON_MAX_DEPTH)
		return false;
	c->p++;
	json_ws(c);
	if (c->p < c->end && *c->p == closer)
	{
		c->p++;
		c->depth--;
		return true;
	}
	for (;;)
	{
		if (is_object)
		{
			json_ws(c);
			if (c->p >= c->end || *c->p != '"' || !json_string(c))
				return false;
			json_ws(c);
			if (c->p >= c->end || *c->p++ != ':')
				return false;
		}
		if (!json_value(c))
			return false;
		json_ws(c);
		if (c->p >= c->end)
			return false;
		if (*c->p == ',')
		{
			c->p++;
			continue;
		}
		if (*c->p++ != closer)
			return false;
		c->depth--;
		return true;
	}
}

/*
 * json_value
 *		Check any JSON value, with leading whitespace.
 */
static bool
json_value(JsonCursor *c)
{
	static const char *const words[] = {"true", "false", "null"};
	int			i;

	json_ws(c);
	if (c->p >= c->end)
		return false;
	if (*c->p == '{' || *c->p == '[')
		return json_container(c);
	if (*c->p == '"')
		return json_string(c);
	for (i = 0; i < 3; i++)
	{
		size_t		n = strlen(words[i]);

		if (*c->p == (unsigned char) words[i][0])
		{
			if ((size_t) (c->end - c->p) < n || memcmp(c->p, words[i], n) != 0)
				return false;
			c->p += n;
			return true;
		}
	}
	return json_number(c);
}

/*
 * json_is_valid
 *		True if text is exactly one JSON value (surrounding whitespace ok)
 *		that jsonb will accept.  Used to decide whether a command's stdout
 *		can be stored as the result as-is.
 */
bool
json_is_valid(const char *text, size_t len)
{
	JsonCursor	c;

	c.p = (const unsigned char *) text;
	c.end = c.p + len;
	c.depth = 0;
	if (!json_value(&c))
		return false;
	json_ws(&c);
	return c.p == c.end;
}

/*
 * json_append_utf8
 *		Append code point cp (below U+110000, no surrogate) as UTF-8.
 */
static void
json_append_utf8(StrBuf *sb, unsigned int cp)
{
	char		u[4];
	size_t		n,
				i;

	if (cp < 0x80)
	{
		u[0] = (char) cp;
		n = 1;
	}
	else if (cp < 0x800)
	{
		u[0] = (char) (0xC0 | (cp >> 6));
		n = 2;
	}
	else if (cp < 0x10000)
	{
		u[0] = (char) (0xE0 | (cp >> 12));
		n = 3;
	}
	else
	{
		u[0] = (char) (0xF0 | (cp >> 18));
		n = 4;
	}
	for (i = 1; i < n; i++)
		u[i] = (char) (0x80 | ((cp >> (6 * (n - 1 - i))) & 0x3F));
	sb_append(sb, u, n);
}

/*
 * json_decode_string
 *		The text of a string token already checked by json_string (from its
 *		opening quote to just past its closing one), unescaped, as UTF-8.
 */
static char *
json_decode_string(const unsigned char *p, const unsigned char *end)
{
	StrBuf		sb = {0};
	JsonCursor	c;

	sb_puts(&sb, "");
	for (p++, end--; p < end; p++)
	{
		unsigned int cp,
					lo;

		if (*p != '\\')
		{
			sb_append(&sb, (const char *) p, 1);
			continue;
		}
		p++;
		switch (*p)
		{
			case 'b':
				sb_puts(&sb, "\b");
				continue;
			case 'f':
				sb_puts(&sb, "\f");
				continue;
			case 'n':
				sb_puts(&sb, "\n");
				continue;
			case 'r':
				sb_puts(&sb, "\r");
				continue;
			case 't':
				sb_puts(&sb, "\t");
				continue;
			case 'u':
				break;
			default:			/* \" \\ \/ */
				sb_append(&sb, (const char *) p, 1);
				continue;
		}
		c.p = p + 1;
		c.end = end;
		(void) json_hex4(&c, &cp);
		if (cp >= 0xD800 && cp <= 0xDBFF)
		{
			c.p += 2;
			(void) json_hex4(&c, &lo);
			cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
		}
		p = c.p - 1;
		json_append_utf8(&sb, cp);
	}
	return sb.data;
}

/*
 * json_flat_get
 *		Read member key of the JSON object text, such as the owner hint in
 *		the DETAIL of an SL020: a string's value unescaped, null as NULL,
 *		any other value as its JSON text, into *value (the caller frees
 *		it).  False when text is not one valid object or lacks the key.
 */
bool
json_flat_get(const char *text, const char *key, char **value)
{
	JsonCursor	c;
	bool		found = false;

	*value = NULL;
	c.p = (const unsigned char *) text;
	c.end = c.p + strlen(text);
	c.depth = 0;
	json_ws(&c);
	if (c.p >= c.end || *c.p++ != '{')
		return false;
	json_ws(&c);
	if (c.p < c.end && *c.p == '}')
		return false;
	for (;;)
	{
		const unsigned char *k = c.p,
				   *v;
		char	   *name;
		bool		match;

		if (c.p >= c.end || *c.p != '"' || !json_string(&c))
			break;
		name = json_decode_string(k, c.p);
		match = strcmp(name, key) == 0 && !found;
		free(name);
		json_ws(&c);
		if (c.p >= c.end || *c.p++ != ':')
			break;
		json_ws(&c);
		v = c.p;
		if (!json_value(&c))
			break;
		if (match && *v == '"')
			*value = json_decode_string(v, c.p);
		else if (match && *v != 'n')
		{
			StrBuf		sb = {0};

			sb_append(&sb, (const char *) v, (size_t) (c.p - v));
			*value = sb.data;
		}
		found = found || match;
		json_ws(&c);
		if (c.p < c.end && *c.p == ',')
		{
			c.p++;
			json_ws(&c);
			continue;
		}
		json_ws(&c);
		if (c.p < c.end && *c.p == '}')
		{
			c.p++;
			json_ws(&c);
			if (c.p == c.end && found)
				return true;
		}
		break;
	}
	free(*value);
	*value = NULL;
	return false;
}

#ifdef SILO_WORKER_SELFTEST
/*
 * main (self-test)
 *		Check the JSON validator and string escaper against a few cases.
 */
int
main(void)
{
	static const struct
	{
		const char *text;
		bool		valid;
	}			cases[] = {
		{"{}", true}, {" [1, -0.5e+3, \"a\\n\\u00e9\", true, null] ", true},
		{"{\"a\":{\"b\":[]}}", true}, {"\"\\ud83d\\ude00\"", true},
		{"0", true}, {"\"caf\xc3\xa9\"", true}, {"", false}, {"01", false},
		{"[1,]", false}, {"{\"a\" 1}", false}, {"tru", false}, {"1.", false},
		{"\"\\u0000\"", false}, {"\"\\ud800\"", false}, {"\"\\x\"", false},
		{"\"\xc3\"", false}, {"[1] x", false}, {"hello", false}, {"-", false},
		{"\"a\tb\"", false}, {"{\"a\":1,}", false}, {"nul", false},
	};
	StrBuf		sb = {0};
	int			bad = 0;
	size_t		i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		if (json_is_valid(cases[i].text, strlen(cases[i].text)) != cases[i].valid)
		{
			printf("FAIL: %s\n", cases[i].text);
			bad++;
		}
	json_append_string(&sb, "q\"b\\\n\x01\xff\xc3\xa9", 9);
	if (strcmp(sb.data, "\"q\\\"b\\\\\\n\\u0001\\ufffd\xc3\xa9\"") != 0 ||
		!json_is_valid(sb.data, sb.len))
	{
		printf("FAIL: escape gave %s\n", sb.data);
		bad++;
	}
	sb_free(&sb);
	utf8_append_clean(&sb, "a\xff\0\xc3\xa9\xe2\x82", 7);
	if (strcmp(sb.data, "a\xef\xbf\xbd\xef\xbf\xbd\xc3\xa9\xef\xbf\xbd\xef\xbf\xbd") != 0 ||
		utf8_chars(sb.data) != 6 ||
		strcmp(utf8_skip_chars(sb.data, 4), "\xef\xbf\xbd\xef\xbf\xbd") != 0 ||
		*utf8_skip_chars(sb.data, 7) != '\0')
	{
		printf("FAIL: utf8 cleaning gave %s\n", sb.data);
		bad++;
	}
	sb_free(&sb);
	{
		const char *hint = "{\"shard\": 3, \"owner_node_id\": \"b\\u00e9\", "
			"\"owner_conninfo\": \"host=x dbname='a\\\"b'\"}";
		char	   *v = NULL,
				   *w = NULL,
				   *x = NULL;

		if (!json_flat_get(hint, "owner_node_id", &v) || strcmp(v, "b\xc3\xa9") != 0 ||
			!json_flat_get(hint, "owner_conninfo", &w) ||
			strcmp(w, "host=x dbname='a\"b'") != 0 ||
			!json_flat_get(hint, "shard", &x) || strcmp(x, "3") != 0)
		{
			printf("FAIL: json_flat_get gave %s, %s, %s\n", v, w, x);
			bad++;
		}
		free(v);
		free(w);
		free(x);
		if (!json_flat_get("{\"owner_node_id\": null}", "owner_node_id", &v) ||
			v != NULL || json_flat_get("{\"a\": 1}", "owner_node_id", &v) ||
			json_flat_get("not json", "a", &v) ||
			json_flat_get("{\"a\": 1,}", "a", &v))
		{
			printf("FAIL: json_flat_get on null, absent or bad input\n");
			bad++;
		}
	}
	printf("%s\n", bad ? "self-test FAILED" : "self-test ok");
	return bad ? 1 : 0;
}
#endif							/* SILO_WORKER_SELFTEST */
