
# 018_docs_examples.pl: the SQL examples of the documentation run as
# written.
#
# Every block fenced as ```sql in README.md and docs/*.md (the pages listed
# in @docs below; a page with such a block that is not listed fails the
# test) is run, in the order of its file,
# in one psql session per file, on a fresh node per file -- as a user
# pasting them one after the other into psql.  The READMEs and operations.md
# start from a node without silo, because their first block is the
# CREATE EXTENSION that installs it; the other pages start from a
# node with silo installed.
#
# The conventions (also in docs/README.md, "Examples"):
#
#  - ```sql opens a block meant to be pasted: it is run.  ```sql-norun
#    opens SQL that is shown but not meant to be pasted as it stands (it
#    removes the installation, say); it is not run.  Blocks of any other
#    kind (```sh, ```ini, plain ```) are not run either.
#  - A statement ends at a semicolon at the end of a line (outside quotes,
#    dollar quotes and comments), or with a psql meta-command such as
#    \gset; a line that starts with a backslash is a statement of its own.
#  - The statement's comment is the "-- ..." on its last line, together with
#    the comment-only, indented lines right below it.  When that comment
#    contains "ERROR", the statement must fail, and the comment must say how
#    as "-- ERROR:  <message> (<SQLSTATE>)": the message ("…" stands for any
#    text) and the SQLSTATE, whichever are given, must be psql's.
#  - Every other statement must succeed: no error from the server, and none
#    from psql either (a \gset that gets no row, say).
#  - A ```text block right after a ```sql block (nothing but blank lines
#    between them) is the output of that block's last statement, as psql
#    prints it by default (aligned, with the header and the "(N rows)"
#    footer), and must be what psql prints.  The comparison is cell by
#    cell: the padding and the separator line do not matter; a uuid and a
#    timestamp match any uuid and any timestamp (generated ids and clock
#    times differ from run to run); "…" in a cell stands for any text.
#    Only statements whose output does not depend on time (or on when the
#    broker runs) get such a block.  A ```text block anywhere else is an
#    error (its output would go unchecked).
#
# A failure names the file, the first line of the block, the line of the
# statement and its text, and shows what psql printed for it (and, for an
# output that differs, the documented and the actual output).
#
# How: the blocks are split into statements here, and after each one the
# script fed to psql (-f -, ON_ERROR_STOP off) has a line
#   \echo @@@ <n> :ERROR :SQLSTATE :LAST_ERROR_MESSAGE
# whose output says whether statement n failed, with which SQLSTATE and
# message.  psql's own errors (stderr) carry the line of the fed script
# ("psql:<stdin>:LINE: ..."), which leads back to the statement.  A
# statement with a documented output runs between "\pset format aligned"
# (and tuples_only off) and the way back, its output between the lines
# "@@@< <n>" and "@@@> <n>".

use strict;
use warnings FATAL => 'all';

use File::Basename qw(basename dirname);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SiloTest;
use Test::More;

my $src = $ENV{SILO_SRC} // dirname(__FILE__) . '/../..';

# the documents, and whether their node starts with silo installed
my @docs = (
	[ 'README.md',          0 ],
	[ 'docs/README.md',     0 ],
	[ 'docs/api.md',        1 ],
	[ 'docs/operations.md', 0 ],
	[ 'docs/security.md',   1 ],
	[ 'docs/limits.md',     1 ],
	[ 'docs/storage.md',    1 ],
	[ 'docs/sqlstates.md',  1 ],
	[ 'docs/cluster.md',    1 ],);

# ---------------------------------------------------------------------------
# Reading the documents
# ---------------------------------------------------------------------------

# doc_blocks(PATH, ERRORS): the ```sql blocks of a Markdown file, in order,
# each as { line => the line number of its first line, lines => [[number,
# text], ...], output => the ```text block right after it, if any, in the
# same form }.  A ```text block anywhere else adds to ERRORS: its output
# would go unchecked.
sub doc_blocks
{
	my ($path, $errors) = @_;
	my (@blocks, $block, $fenced, $after_sql);

	open my $fh, '<', $path or die "cannot read $path: $!";
	while (my $text = <$fh>)
	{
		chomp $text;
		my $number = $.;
		if (!$fenced)
		{
			if ($text !~ /^```\s*(\S*)\s*$/)
			{
				$after_sql = undef if $text =~ /\S/;
				next;
			}
			$fenced = 1;
			$block = undef;
			if ($1 eq 'sql')
			{
				$block = { line => $number + 1, lines => [] };
			}
			elsif ($1 eq 'text' && $after_sql)
			{
				$block = { line => $number + 1, lines => [], output_of => $after_sql };
			}
			elsif ($1 eq 'text')
			{
				push @$errors, "$path, line $number: a ```text block that does not follow "
				  . "a ```sql block (only blank lines may be between them)";
			}
			$after_sql = undef;
			next;
		}
		if ($text =~ /^```\s*$/)
		{
			if ($block && $block->{output_of})
			{
				$block->{output_of}{output} = $block;
				delete $block->{output_of};
			}
			elsif ($block)
			{
				push @blocks, $block;
				$after_sql = $block;
			}
			$fenced = 0;
			$block  = undef;
			next;
		}
		push @{ $block->{lines} }, [ $number, $text ] if $block;
	}
	close $fh;
	die "$path: a fenced block is not closed" if $fenced;
	return @blocks;
}

# scan_line(TEXT, STATE): lex one line of SQL as psql would, from STATE (a
# hash: mode '' | "'" | '"' | '$' | '/*', with tag and depth), which it
# updates.  Returns { code => the line holds SQL outside comments, ends =>
# it ends a statement (a last ';', or a meta-command), meta => it holds a
# meta-command, comment => the text of its "--" comment, or undef }.
sub scan_line
{
	my ($text, $st) = @_;
	my %r = (code => 0, ends => 0, meta => 0, comment => undef);
	my $i = 0;
	my $n = length $text;

	while ($i < $n)
	{
		my $c = substr($text, $i, 1);
		my $two = substr($text, $i, 2);

		if ($st->{mode} eq "'")
		{
			if ($c eq "'")
			{
				if (substr($text, $i + 1, 1) eq "'") { $i += 2; next; }
				$st->{mode} = '';
			}
			$i++;
			next;
		}
		if ($st->{mode} eq '"')
		{
			$st->{mode} = '' if $c eq '"';
			$i++;
			next;
		}
		if ($st->{mode} eq '$')
		{
			if (substr($text, $i, length $st->{tag}) eq $st->{tag})
			{
				$i += length $st->{tag};
				$st->{mode} = '';
				next;
			}
			$i++;
			next;
		}
		if ($st->{mode} eq '/*')
		{
			if ($two eq '*/')
			{
				$st->{mode} = '' if --$st->{depth} == 0;
				$i += 2;
				next;
			}
			$st->{depth}++ if $two eq '/*';
			$i += $two eq '/*' ? 2 : 1;
			next;
		}

		# outside quotes and comments
		if ($c =~ /\s/) { $i++; next; }
		if ($two eq '--')
		{
			$r{comment} = substr($text, $i + 2);
			last;
		}
		if ($two eq '/*')
		{
			$st->{mode}  = '/*';
			$st->{depth} = 1;
			$i += 2;
			next;
		}
		$r{code} = 1;
		$r{ends} = 0;    # anything after a ';' continues the statement
		if ($c eq '\\')
		{
			# a meta-command takes the rest of the line; \gset, \g and the
			# like send the query buffer
			$r{meta} = 1;
			$r{ends} = 1;
			last;
		}
		if ($c eq ';') { $r{ends} = 1; }
		elsif ($c eq "'") { $st->{mode} = "'"; }
		elsif ($c eq '"') { $st->{mode} = '"'; }
		elsif (substr($text, $i) =~ /^(\$[A-Za-z_][A-Za-z_0-9]*\$|\$\$)/)
		{
			$st->{mode} = '$';
			$st->{tag}  = $1;
			$i += length $1;
			next;
		}
		$i++;
	}
	return \%r;
}

# statements(FILE, BLOCK, ERRORS): the statements of a block, in order, each
# as { file, block => its first line, line => the statement's first line,
# lines => [[number, text], ...], comment => its comment, and the lines
# fed to psql around it, which script() fills in }.  Also the comment-only
# and blank lines between statements, as { lines } alone (fed as they
# are).  A block that ends inside a statement adds to ERRORS.
sub statements
{
	my ($file, $block, $errors) = @_;
	my (@out, $cur, $prev);
	my %st = (mode => '', tag => '', depth => 0);

	for my $l (@{ $block->{lines} })
	{
		my ($number, $text) = @$l;
		my $r = scan_line($text, \%st);

		if (!$cur && !$r->{code} && $st{mode} eq '')
		{
			# blank or comment-only, between statements: an indented
			# comment right below a statement is still that statement's
			if ($prev && defined $r->{comment} && $text =~ /^\s/)
			{
				$prev->{comment} .= ' ' . $r->{comment};
			}
			else
			{
				$prev = undef;
			}
			push @out, { lines => [$l] };
			next;
		}
		$cur //= {
			file    => $file,
			block   => $block->{line},
			line    => $number,
			lines   => [],
			comment => ''
		};
		push @{ $cur->{lines} }, $l;
		if ($r->{ends} && $st{mode} eq '')
		{
			$cur->{comment} = $r->{comment} // '';
			push @out, $cur;
			$prev = $cur;
			$cur  = undef;
		}
	}
	push @$errors, "$file, block at line $block->{line}: it ends inside a statement "
	  . "(line $cur->{line}: no ';' at the end of a line outside quotes and comments)"
	  if $cur;
	return @out;
}

# expectation(COMMENT): undef when the statement must succeed; else
# { sqlstate, message } from "ERROR:  <message> (<SQLSTATE>)", either
# possibly empty.
sub expectation
{
	my ($comment) = @_;
	return undef unless $comment =~ /ERROR/;
	my ($said) = $comment =~ /ERROR:?\s*(.*?)\s*$/;
	my $sqlstate = '';
	$sqlstate = $1 if $said =~ s/\s*\(([0-9A-Z]{5})\)\s*$//;
	if ($sqlstate eq '' && $said =~ /^([0-9A-Z]{5})$/)
	{
		$sqlstate = $1;    # "-- ERROR: 0A000"
		$said     = '';
	}
	return { sqlstate => $sqlstate, message => $said };
}

# mask(TEXT): TEXT with every uuid and every timestamp replaced by a
# placeholder, so that generated ids and clock times compare equal.
sub mask
{
	my ($t) = @_;
	$t =~ s/\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b/<uuid>/gi;
	$t =~ s/\b\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:\.\d+)?(?:[+-]\d\d(?::\d\d)?|Z)?/<timestamp>/g;
	return $t;
}

# output_rows(TEXT): psql's aligned output as lines of trimmed, masked
# cells joined by " | "; blank lines and the separator line left out.
sub output_rows
{
	my @rows;
	for my $line (split /\n/, $_[0])
	{
		next if $line =~ /^\s*$/ || $line =~ /^[-+]+$/;
		push @rows, join(' | ', map { mask(s/^\s+|\s+$//gr) } split(/\|/, $line, -1));
	}
	return @rows;
}

# output_differs(DOCUMENTED, ACTUAL): undef when psql's ACTUAL output is the
# DOCUMENTED one, row by row ("…" in the documented text stands for any
# text); else what differs first.
sub output_differs
{
	my @want = output_rows($_[0]);
	my @got  = output_rows($_[1]);
	for my $i (0 .. ($#want > $#got ? $#want : $#got))
	{
		my ($w, $g) = ($want[$i], $got[$i]);
		return "line " . ($i + 1) . " is missing: \"$w\"" unless defined $g;
		return "an extra line " . ($i + 1) . ": \"$g\"" unless defined $w;
		my $re = join('.*', map { quotemeta } split /…/, $w, -1);
		return "line " . ($i + 1) . ": \"$g\", not \"$w\"" unless $g =~ /^$re$/;
	}
	return undef;
}

# ---------------------------------------------------------------------------
# Running them
# ---------------------------------------------------------------------------

# run_doc(FILE, EXTENSION): run the blocks of FILE (relative to the source
# tree) on a fresh node, with silo installed first when EXTENSION is true.
sub run_doc
{
	my ($file, $extension) = @_;
	my (@errors, @items);

	my @blocks = doc_blocks("$src/$file", \@errors);
	for my $block (@blocks)
	{
		my @these = statements($file, $block, \@errors);
		if ($block->{output})
		{
			# the documented output is that of the block's last statement
			my ($last) = grep { defined $_->{line} } reverse @these;
			push @errors, "$file, block at line $block->{line}: a ```text block follows it, "
			  . "but it has no statement"
			  unless $last;
			$last->{output} = $block->{output} if $last;
		}
		push @items, @these;
	}
	my @stmts = grep { defined $_->{line} } @items;
	ok(@blocks > 0 && @stmts > 0,
		"$file: " . scalar(@blocks) . " sql blocks, " . scalar(@stmts) . " statements");
	if (@errors)
	{
		fail($_) for @errors;
		return;
	}

	# the script: every line as written, and after each statement its marker
	my @script = ('\set VERBOSITY default', '\set SHOW_CONTEXT never');
	my %at_line;    # line of the script -> statement
	for my $k (0 .. $#items)
	{
		my $item = $items[$k];
		push @script, '\pset format aligned', '\pset tuples_only off', "\\echo \@\@\@< $k"
		  if $item->{output};
		for my $l (@{ $item->{lines} })
		{
			push @script, $l->[1];
			$at_line{ scalar @script } = $item if defined $item->{line};
		}
		next unless defined $item->{line};
		push @script, "\\echo \@\@\@ $k :ERROR :SQLSTATE :LAST_ERROR_MESSAGE";
		$at_line{ scalar @script } = $item;
		push @script, "\\echo \@\@\@> $k", '\pset format unaligned', '\pset tuples_only on'
		  if $item->{output};
	}

	(my $name = $file) =~ s{\.md$}{};
	$name =~ s{/}{_}g;			# README.md and docs/README.md differ
	my $node = silo_node("docs_$name", no_extension => !$extension);
	my ($out, $err) = ('', '');
	$node->psql(
		'postgres', join("\n", @script) . "\n",
		stdout        => \$out,
		stderr        => \$err,
		on_error_stop => 0,
		timeout       => $PostgreSQL::Test::Utils::timeout_default);

	# into the test's log, for whoever reads a failure (as TAP comments, so
	# that no line of it can pass for a TAP line)
	note("---- $file: what psql printed\n$out\n---- and on stderr\n$err");

	# what psql said of each statement, and printed for those with an output
	my (%result, %printed);
	for (split /\n/, $out)
	{
		$result{$1} = { failed => $2 eq 'true', sqlstate => $3, message => $4 }
		  if /^\@\@\@ (\d+) (true|false) (\S+) ?(.*)$/;
	}
	$printed{$1} = $2 while $out =~ /^\@\@\@< (\d+)\n(.*?)^\@\@\@ \1 [^\n]*\n\@\@\@> \1$/msg;
	my $last;
	for (split /\n/, $err)
	{
		$last = $at_line{$1} if /^psql:<stdin>:(\d+): /;
		push @{ $last->{said} }, $_ if $last;
	}

	for my $k (0 .. $#items)
	{
		my $s = $items[$k];
		next unless defined $s->{line};
		my $text = join("\n", map { $_->[1] } @{ $s->{lines} });
		my $said = join("\n", @{ $s->{said} // [] });
		my $r = $result{$k};
		my $want = expectation($s->{comment});
		my $where = "$s->{file}, block at line $s->{block}, statement at line $s->{line}";
		my $short = $s->{lines}[0][1];
		$short =~ s/^\s+//;
		$short = substr($short, 0, 60) . '...' if length $short > 63;
		my @why;

		if (!$r)
		{
			push @why, 'psql did not run it (or its marker was lost)';
		}
		elsif (!$want)
		{
			push @why, "it failed: $r->{sqlstate} $r->{message}" if $r->{failed};
			push @why, 'psql reported an error'
			  if !$r->{failed} && $said =~ /(^|\n)psql:<stdin>:\d+: (error|ERROR|FATAL|PANIC):/;
		}
		else
		{
			push @why, "the comment says ERROR but names neither a message nor a SQLSTATE"
			  if $want->{sqlstate} eq '' && $want->{message} eq '';
			if (!$r->{failed})
			{
				push @why, 'it succeeded, but its comment says it fails';
			}
			else
			{
				push @why, "SQLSTATE $r->{sqlstate}, not $want->{sqlstate}"
				  if $want->{sqlstate} ne '' && $r->{sqlstate} ne $want->{sqlstate};
				if ($want->{message} ne '')
				{
					my $re = join('.*', map { quotemeta } split /…/, $want->{message}, -1);
					push @why, "message \"$r->{message}\", not \"$want->{message}\""
					  unless $r->{message} =~ /^$re$/;
				}
			}
		}
		my ($documented, $differs);
		if ($s->{output} && $r && !$r->{failed})
		{
			$documented = join("\n", map { $_->[1] } @{ $s->{output}{lines} });
			$differs = output_differs($documented, $printed{$k} // '');
			push @why, "its output is not the one of the ```text block at line "
			  . "$s->{output}{line}: $differs"
			  if defined $differs;
		}
		ok(!@why, "$s->{file}:$s->{line}: $short"
			  . ($want ? ' (fails as its comment says)' : '')
			  . ($s->{output} ? ' (output as documented)' : ''))
		  or diag("$where:\n$text\n-- " . join("; ", @why)
			  . ($said ne '' ? "\n-- psql said:\n$said" : '')
			  . (defined $differs
				? "\n-- documented output:\n$documented\n-- psql printed:\n" . ($printed{$k} // '')
				: ''));
	}
	$node->stop('fast');
	return;
}

# every page of the documentation with a ```sql block is in @docs: a new
# page (or a first example on an old one) cannot go untested
{
	my %listed = map { $_->[0] => 1 } @docs;
	my @unlisted;
	for my $path ('README.md', map { "docs/" . basename($_) } glob("$src/docs/*.md"))
	{
		open my $fh, '<', "$src/$path" or die "$src/$path: $!";
		my $has_sql = grep { /^```sql\s*$/ } <$fh>;
		close $fh;
		push @unlisted, $path if $has_sql && !$listed{$path};
	}
	is(join(', ', @unlisted), '', 'every page with ```sql examples is run here');
}

run_doc(@$_) for @docs;

done_testing();
