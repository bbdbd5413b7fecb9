module github.com/fairqueue/fairqueue

go 1.26.0
