module go.uber.org/zap

go 1.19
