module github.com/pgrouted/pgrouted

go 1.26
