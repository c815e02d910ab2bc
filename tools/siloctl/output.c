/*-------------------------------------------------------------------------
 *
 * output.c
 *	  Result tables and their text form.
 *
 * Every command that prints rows builds a Table -- column names, a kind per
 * column (how --json shows it) and cells as strings, NULL for SQL NULL --
 * either from a PGresult or by hand, then prints it as text here or as
 * JSON in json.c.  The text form is for people: an aligned table with an
 * upper-case header (empty cells for NULL, booleans as true / false), or,
 * for one record, a "name  value" line per column.
 *
 * tools/siloctl/output.c
 *
 *-------------------------------------------------------------------------
 */
#include "siloctl.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* PostgreSQL type OIDs the --json form treats specially */
#define BOOLOID			16
#define INT8OID			20
#define INT2OID			21
#define INT4OID			23
#define OIDOID			26
#define JSONOID			114
#define FLOAT4OID		700
#define FLOAT8OID		701
#define INT2ARRAYOID	1005
#define INT4ARRAYOID	1007
#define TEXTARRAYOID	1009
#define VARCHARARRAYOID 1015
#define INT8ARRAYOID	1016
#define NUMERICOID		1700
#define JSONBOID		3802

/*
 * kind_of_type
 *		How a column of a PostgreSQL type is shown in JSON.
 */
static CellKind
kind_of_type(Oid type)
{
	switch (type)
	{
		case INT2OID:
		case INT4OID:
		case INT8OID:
		case OIDOID:
			return CELL_INT;
		case FLOAT4OID:
		case FLOAT8OID:
			return CELL_FLOAT;
		case NUMERICOID:
			return CELL_BIGNUM;
		case BOOLOID:
			return CELL_BOOL;
		case JSONOID:
		case JSONBOID:
			return CELL_JSON;
		case INT2ARRAYOID:
		case INT4ARRAYOID:
		case INT8ARRAYOID:
			return CELL_INT_ARRAY;
		case TEXTARRAYOID:
		case VARCHARARRAYOID:
			return CELL_TEXT_ARRAY;
	}
	return CELL_TEXT;
}

/*
 * table_new
 *		An empty table with these columns (kinds NULL: all text).
 */
Table *
table_new(int ncols, const char *const *names, const CellKind *kinds)
{
	Table	   *t = xmalloc(sizeof(Table));

	t->ncols = ncols;
	t->names = xmalloc(sizeof(char *) * ncols);
	t->kinds = xmalloc(sizeof(CellKind) * ncols);
	for (int i = 0; i < ncols; i++)
	{
		t->names[i] = xstrdup(names[i]);
		t->kinds[i] = kinds ? kinds[i] : CELL_TEXT;
	}
	t->nrows = 0;
	t->cap = 0;
	t->cells = NULL;
	return t;
}

/*
 * table_add_row
 *		Append a row (ncols cells, each copied; NULL is SQL NULL).
 */
void
table_add_row(Table *t, const char *const *cells)
{
	if (t->nrows == t->cap)
	{
		t->cap = t->cap ? t->cap * 2 : 16;
		t->cells = xrealloc(t->cells, sizeof(char *) * (size_t) t->cap * t->ncols);
	}
	for (int i = 0; i < t->ncols; i++)
		t->cells[(size_t) t->nrows * t->ncols + i] = cells[i] ? xstrdup(cells[i]) : NULL;
	t->nrows++;
}

/*
 * table_from_result
 *		A table holding a PGresult's rows, with kinds from the column types.
 */
Table *
table_from_result(const PGresult *res)
{
	int			ncols = PQnfields(res);
	const char **names = xmalloc(sizeof(char *) * (ncols ? ncols : 1));
	CellKind   *kinds = xmalloc(sizeof(CellKind) * (ncols ? ncols : 1));
	const char **row = xmalloc(sizeof(char *) * (ncols ? ncols : 1));
	Table	   *t;

	for (int i = 0; i < ncols; i++)
	{
		names[i] = PQfname(res, i);
		kinds[i] = kind_of_type(PQftype(res, i));
	}
	t = table_new(ncols, names, kinds);
	for (int r = 0; r < PQntuples(res); r++)
	{
		for (int i = 0; i < ncols; i++)
			row[i] = PQgetisnull(res, r, i) ? NULL : PQgetvalue(res, r, i);
		table_add_row(t, row);
	}
	free(names);
	free(kinds);
	free(row);
	return t;
}

/*
 * table_col
 *		The index of a column by name, or -1.
 */
int
table_col(const Table *t, const char *name)
{
	for (int i = 0; i < t->ncols; i++)
		if (strcmp(t->names[i], name) == 0)
			return i;
	return -1;
}

/*
 * table_get
 *		A cell by row and column name (NULL for SQL NULL or no such
 *		column).
 */
const char *
table_get(const Table *t, int row, const char *name)
{
	int			c = table_col(t, name);

	if (c < 0 || row < 0 || row >= t->nrows)
		return NULL;
	return t->cells[(size_t) row * t->ncols + c];
}

/*
 * table_free
 *		Free a table and its cells.
 */
void
table_free(Table *t)
{
	if (t == NULL)
		return;
	for (size_t i = 0; i < (size_t) t->nrows * t->ncols; i++)
		free(t->cells[i]);
	for (int i = 0; i < t->ncols; i++)
		free(t->names[i]);
	free(t->cells);
	free(t->names);
	free(t->kinds);
	free(t);
}

/*
 * display_bool
 *		A boolean cell ("t" / "f") as people read it.
 */
const char *
display_bool(const char *v)
{
	if (v == NULL)
		return "";
	return strcmp(v, "t") == 0 ? "true" : strcmp(v, "f") == 0 ? "false" : v;
}

/*
 * cell_text
 *		A cell as the text form shows it.
 */
static const char *
cell_text(const Table *t, int row, int col)
{
	const char *v = t->cells[(size_t) row * t->ncols + col];

	if (v == NULL)
		return "";
	if (t->kinds[col] == CELL_BOOL)
		return display_bool(v);
	return v;
}

/*
 * text_width
 *		Characters in a UTF-8 string (bytes that do not continue one).
 */
static size_t
text_width(const char *s)
{
	size_t		n = 0;

	for (; *s; s++)
		if (((unsigned char) *s & 0xc0) != 0x80)
			n++;
	return n;
}

/*
 * print_padded
 *		s, then spaces up to width characters.
 */
static void
print_padded(const char *s, size_t width)
{
	size_t		w = text_width(s);

	fputs(s, stdout);
	for (; w < width; w++)
		putchar(' ');
}

/*
 * print_table
 *		An aligned table: an upper-case header line, then one line per row,
 *		columns two spaces apart (the last one not padded).
 */
void
print_table(const Table *t)
{
	size_t	   *width = xmalloc(sizeof(size_t) * (t->ncols ? t->ncols : 1));

	for (int c = 0; c < t->ncols; c++)
	{
		width[c] = text_width(t->names[c]);
		for (int r = 0; r < t->nrows; r++)
		{
			size_t		w = text_width(cell_text(t, r, c));

			if (w > width[c])
				width[c] = w;
		}
	}
	for (int c = 0; c < t->ncols; c++)
	{
		char	   *upper = xstrdup(t->names[c]);

		for (char *p = upper; *p; p++)
			*p = (char) toupper((unsigned char) *p);
		if (c == t->ncols - 1)
			fputs(upper, stdout);
		else
		{
			print_padded(upper, width[c]);
			fputs("  ", stdout);
		}
		free(upper);
	}
	putchar('\n');
	for (int r = 0; r < t->nrows; r++)
	{
		int			last = t->ncols - 1;

		/* no trailing blanks: stop after the last non-empty cell */
		while (last > 0 && cell_text(t, r, last)[0] == '\0')
			last--;
		for (int c = 0; c <= last; c++)
		{
			if (c == last)
				fputs(cell_text(t, r, c), stdout);
			else
			{
				print_padded(cell_text(t, r, c), width[c]);
				fputs("  ", stdout);
			}
		}
		putchar('\n');
	}
	free(width);
}

/*
 * print_record
 *		One row as "name  value" lines, names aligned.
 */
void
print_record(const Table *t, int row)
{
	size_t		width = 0;

	for (int c = 0; c < t->ncols; c++)
		if (text_width(t->names[c]) > width)
			width = text_width(t->names[c]);
	for (int c = 0; c < t->ncols; c++)
	{
		const char *v = cell_text(t, row, c);

		if (v[0] == '\0')
			fputs(t->names[c], stdout);
		else
		{
			print_padded(t->names[c], width + 2);
			fputs(v, stdout);
		}
		putchar('\n');
	}
}
