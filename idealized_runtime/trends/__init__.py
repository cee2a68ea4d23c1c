"""Provider monitoring's time series: a provider's rounds in time order, their medians and
spread over a window, and the changes that stand out from the provider's own noise.

``changes``  where a series shifts: a robust CUSUM (rolling median, MAD scale)
``series``   rounds grouped per provider and model, statistics per window, changes per statistic
"""
