"""A repository read through libgit2 as a hostile one: its work tree, its objects, patches and changed lines."""
