module hami-place/bench/webhook-go

go 1.22
