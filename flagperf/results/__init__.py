"""Result parsing and summaries for flagperf runs."""
