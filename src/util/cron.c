/*-------------------------------------------------------------------------
 *
 * cron.c
 *	  Cron expressions of recurring schedules (silo.schedule): the check of
 *	  one, and the next minute it matches.  pg_cron (1.4) runs the
 *	  schedules; this parser accepts a subset of what pg_cron's (Vixie
 *	  cron's) accepts, so that a schedule silo takes is one pg_cron takes
 *	  too: five fields (minute hour day-of-month month day-of-week) of
 *	  '*', numbers, names (jan..dec, sun..sat), ranges a-b, steps ('*' or a
 *	  range, then /n), lists, or one of @hourly, @daily, @midnight, @weekly,
 *	  @monthly, @yearly, @annually.  Not @reboot, nor pg_cron's
 *	  'N seconds': a firing is named by its minute.  Times are GMT, as
 *	  pg_cron's.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_util.h"

#include <ctype.h>

#include "datatype/timestamp.h"
#include "utils/datetime.h"

static const char *const cron_months[] = {
	"jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec", NULL
};
static const char *const cron_days[] = {
	"sun", "mon", "tue", "wed", "thu", "fri", "sat", NULL
};

/* one field's bounds and names */
typedef struct CronField
{
	const char *what;
	int			lo;
	int			hi;
	const char *const *names;	/* names[i] is lo + i */
} CronField;

static const CronField cron_fields[5] = {
	{"minute", 0, 59, NULL},
	{"hour", 0, 23, NULL},
	{"day of month", 1, 31, NULL},
	{"month", 1, 12, cron_months},
	{"day of week", 0, 7, cron_days},
};

/* the macros pg_cron's parser (Vixie cron's) accepts, and what each means */
static const char *const cron_macros[][2] = {
	{"@yearly", "0 0 1 1 *"},
	{"@annually", "0 0 1 1 *"},
	{"@monthly", "0 0 1 * *"},
	{"@weekly", "0 0 * * 0"},
	{"@daily", "0 0 * * *"},
	{"@midnight", "0 0 * * *"},
	{"@hourly", "0 * * * *"},
};

/*
 * cron_invalid: raise the one error of a bad expression, with what is
 * wrong as the detail.
 */
static void
cron_invalid(const char *expr, const char *detail)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("cron must be a cron expression of 5 fields"),
			 errdetail("%s (in \"%s\").", detail, expr),
			 errhint("Fields are minute, hour, day of month, month, day of week, in GMT: \"*/15 * * * *\", \"0 3 * * mon-fri\"; or one of @hourly, @daily, @weekly, @monthly, @yearly.")));
}

/*
 * cron_number: a number or (where the field has them) a name at *p;
 * advances *p past it.
 */
static int
cron_number(const char *expr, const CronField *f, const char **p)
{
	const char *s = *p;
	int			v = 0;
	int			n = 0;

	if (isdigit((unsigned char) *s))
	{
		while (isdigit((unsigned char) *s) && n < 3)
			v = v * 10 + (*s++ - '0'), n++;
		if (isdigit((unsigned char) *s))
			cron_invalid(expr, psprintf("The %s has a number too long", f->what));
	}
	else if (f->names != NULL && isalpha((unsigned char) *s))
	{
		int			i;

		for (i = 0; f->names[i] != NULL; i++)
			if (pg_strncasecmp(s, f->names[i], 3) == 0 && !isalpha((unsigned char) s[3]))
				break;
		if (f->names[i] == NULL)
			cron_invalid(expr, psprintf("The %s has an unknown name", f->what));
		v = f->lo + i;
		s += 3;
	}
	else
		cron_invalid(expr, psprintf("The %s has a character that is not a number, '*', ',', '-' or '/'",
									f->what));
	if (v < f->lo || v > f->hi)
		cron_invalid(expr, psprintf("The %s %d is not between %d and %d", f->what, v, f->lo, f->hi));
	*p = s;
	return v;
}

/*
 * cron_field: parse field f (the text from *p to the next blank) into
 * bits; returns whether it starts with '*'.
 */
static bool
cron_field(const char *expr, const CronField *f, const char **p, uint64 *bits)
{
	const char *s = *p;
	bool		star = (*s == '*');

	*bits = 0;
	for (;;)
	{
		int			a,
					b,
					step = 1,
					v;
		bool		single = false;

		if (*s == '*')
		{
			a = f->lo;
			b = f->hi;
			s++;
		}
		else
		{
			a = b = cron_number(expr, f, &s);
			single = (*s != '-');
			if (*s == '-')
			{
				s++;
				b = cron_number(expr, f, &s);
				if (b < a)
					cron_invalid(expr, psprintf("The %s has a range that ends before it starts", f->what));
			}
		}
		if (*s == '/')
		{
			if (single)
				cron_invalid(expr, psprintf("The %s has a step after a single value (write a range or '*' before '/')",
											f->what));
			s++;
			if (!isdigit((unsigned char) *s))
				cron_invalid(expr, psprintf("The %s has a '/' not followed by a number", f->what));
			step = 0;
			while (isdigit((unsigned char) *s) && step < 1000)
				step = step * 10 + (*s++ - '0');
			if (step < 1 || step > f->hi)
				cron_invalid(expr, psprintf("The %s has a step that is not between 1 and %d", f->what, f->hi));
		}
		for (v = a; v <= b; v += step)
			*bits |= UINT64CONST(1) << v;
		if (*s != ',')
			break;
		s++;
	}
	if (*s != '\0' && *s != ' ' && *s != '\t')
		cron_invalid(expr, psprintf("The %s has a character that is not a number, '*', ',', '-' or '/'",
									f->what));
	*p = s;
	return star;
}

/*
 * silo_cron_parse: check expr (22023 when it is not one silo and pg_cron
 * both take) and fill out with what it matches.
 */
void
silo_cron_parse(const char *expr, SiloCron *out)
{
	const char *s = expr;
	uint64		bits[5];
	int			i;

	memset(out, 0, sizeof(*out));
	while (*s == ' ' || *s == '\t')
		s++;
	if (*s == '@')
	{
		for (i = 0; i < (int) lengthof(cron_macros); i++)
			if (pg_strcasecmp(s, cron_macros[i][0]) == 0)
			{
				silo_cron_parse(cron_macros[i][1], out);
				return;
			}
		cron_invalid(expr, "The only macros are @hourly, @daily, @midnight, @weekly, @monthly, @yearly and @annually");
	}
	for (i = 0; i < 5; i++)
	{
		bool		star;

		if (*s == '\0')
			cron_invalid(expr, psprintf("It has %d fields", i));
		star = cron_field(expr, &cron_fields[i], &s, &bits[i]);
		if (i == 2)
			out->dom_star = star;
		if (i == 4)
			out->dow_star = star;
		while (*s == ' ' || *s == '\t')
			s++;
	}
	if (*s != '\0')
		cron_invalid(expr, "It has more than 5 fields (pg_cron has no seconds field)");
	out->minute = bits[0];
	out->hour = (uint32) bits[1];
	out->dom = (uint32) bits[2];
	out->month = (uint16) bits[3];
	/* 7 is Sunday too */
	out->dow = (uint8) ((bits[4] | (bits[4] >> 7)) & 0x7f);
}

/*
 * cron_day_matches: whether the day (julian day jd) matches, with Vixie
 * cron's rule: when day of month or day of week starts with '*', both
 * must match, else either.
 */
static bool
cron_day_matches(const SiloCron *c, int jd)
{
	int			y,
				m,
				d;
	bool		dom,
				dow;

	j2date(jd, &y, &m, &d);
	if (!(c->month & (1 << m)))
		return false;
	dom = (c->dom & (UINT64CONST(1) << d)) != 0;
	dow = (c->dow & (1 << j2day(jd))) != 0;
	return (c->dom_star || c->dow_star) ? (dom && dow) : (dom || dow);
}

/*
 * silo_cron_next: the first minute after `after` that c matches, in GMT;
 * false when none comes within 10 years (the 30th of February).
 */
bool
silo_cron_next(const SiloCron *c, TimestampTz after, TimestampTz *next)
{
	int64		minute = after / USECS_PER_MINUTE;
	int64		day;
	int			h,
				mi,
				i;

	if (after < 0 && after % USECS_PER_MINUTE != 0)
		minute--;
	minute++;
	day = minute / MINS_PER_HOUR / HOURS_PER_DAY;
	if (minute < 0 && minute % (MINS_PER_HOUR * HOURS_PER_DAY) != 0)
		day--;
	h = (int) ((minute - day * MINS_PER_HOUR * HOURS_PER_DAY) / MINS_PER_HOUR);
	mi = (int) ((minute - day * MINS_PER_HOUR * HOURS_PER_DAY) % MINS_PER_HOUR);
	for (i = 0; i < 3660; i++, day++, h = 0, mi = 0)
	{
		if (!cron_day_matches(c, (int) day + POSTGRES_EPOCH_JDATE))
			continue;
		for (; h < HOURS_PER_DAY; h++, mi = 0)
		{
			if (!(c->hour & (1 << h)))
				continue;
			for (; mi < MINS_PER_HOUR; mi++)
				if (c->minute & (UINT64CONST(1) << mi))
				{
					*next = day * USECS_PER_DAY + h * USECS_PER_HOUR + mi * USECS_PER_MINUTE;
					return true;
				}
		}
	}
	return false;
}

/*
 * silo_minute_text: the minute of t in GMT as ISO 8601 ("2026-05-01T03:00Z"),
 * the name a firing gives its job.
 */
char *
silo_minute_text(TimestampTz t)
{
	int64		minute = t / USECS_PER_MINUTE;
	int64		day;
	int			y,
				m,
				d,
				rem;

	if (t < 0 && t % USECS_PER_MINUTE != 0)
		minute--;
	day = minute / (MINS_PER_HOUR * HOURS_PER_DAY);
	if (minute < 0 && minute % (MINS_PER_HOUR * HOURS_PER_DAY) != 0)
		day--;
	rem = (int) (minute - day * MINS_PER_HOUR * HOURS_PER_DAY);
	j2date((int) day + POSTGRES_EPOCH_JDATE, &y, &m, &d);
	return psprintf("%04d-%02d-%02dT%02d:%02dZ", y, m, d, rem / MINS_PER_HOUR,
					rem % MINS_PER_HOUR);
}

/*
 * silo_minute_floor: t rounded down to its minute.
 */
TimestampTz
silo_minute_floor(TimestampTz t)
{
	int64		minute = t / USECS_PER_MINUTE;

	if (t < 0 && t % USECS_PER_MINUTE != 0)
		minute--;
	return minute * USECS_PER_MINUTE;
}
